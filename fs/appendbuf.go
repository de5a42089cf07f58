package fs

import (
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
)

// A small pending append (a CGI script's log line) is kept in memory
// until its commit writes it to the end of the file with one pwrite: its
// staging file cost a dozen system calls per append (write it, stat it
// three times, find its data, read it back, drop it) for a hundred bytes
// (docs/design.md, commits). So is the content of a file its writer has
// just created (newFile): its commit is an append to the empty file.
// Anything that needs the pending version as a file (a read or stat
// through the handle, a truncation, a rejected commit) first spills the
// buffer to a staging file, which is then used as before. Not in a
// cluster: its recovery reads a cut-off append's staging file by name.
const (
	appendBufMax = 8 << 10 // per handle
	appendBufAll = 8 << 20 // all handles together
)

// appendBuffers counts the bytes all handles hold in memory.
type appendBuffers struct{ all atomic.Int64 }

func (b *appendBuffers) take(n int) bool {
	if b.all.Add(int64(n)) > appendBufAll {
		b.all.Add(-int64(n))
		return false
	}
	return true
}

func (b *appendBuffers) give(n int) { b.all.Add(-int64(n)) }

// bufferWrite keeps data in memory if this handle has no staging file,
// data fits, and it goes where buffered bytes go: at the end for an
// appender, right after what a new file's writer wrote (newFile). It
// reports whether it did. An empty write is not a change: it goes the
// old way, which does not count it.
func (h *handle) bufferWrite(data []byte, off int64) bool {
	r := h.n.r
	if h.p.made && !h.p.dirty() && h.p.stage == nil && h.base == h.first && h.baseVer == h.n.f.ver() {
		// The first write, and the file is still the empty one its
		// create made: the pending version starts empty.
		h.p.newFile = true
	}
	next := h.p.appends() || h.p.newFile && off == int64(len(h.p.buf))
	if len(data) == 0 || !next || h.p.stage != nil || r.clustered() || h.mapped.Load() ||
		len(h.p.buf)+len(data) > appendBufMax || !r.appendBufs.take(len(data)) {
		return false
	}
	h.p.buf = append(h.p.buf, data...)
	if h.p.newFile {
		// The kernel's clock for file times: a fine-grained time here
		// could be later than the next change the kernel stamps (an
		// O_TRUNC's), and the file's times would go back.
		_ = unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &h.p.wroteAt)
	}
	return true
}

// spill moves the buffered bytes to a staging file, as copyUp would make
// one, without looking at base: a rejected commit spills while another
// holds the file's lock. A new file's pending version is whole, so its
// staging file is named (a replace renames it), even when empty.
func (h *handle) spill() error {
	if len(h.p.buf) == 0 && !h.p.newFile {
		return nil
	}
	take := h.n.r.pool.TakeNameless
	if h.p.newFile {
		take = h.n.r.pool.Take
	}
	f, nm, err := take()
	if err != nil {
		return err
	}
	if len(h.p.buf) > 0 {
		if _, err := unix.Pwrite(int(f.Fd()), h.p.buf, 0); err != nil {
			h.n.r.dropTemp(h.n.r.stagingfd, f, nm)
			return err
		}
	}
	h.p.stage, h.p.stageNm, h.p.newFile = f, nm, false
	h.p.dropBuf(h.n.r)
	return nil
}

// spillNew gives a new file's writer its staging file, for what needs
// the pending version as a file.
func (h *handle) spillNew() error {
	if !h.p.newFile {
		return nil
	}
	return h.spill()
}

// statNew is statLocked for a new file's writer: the file it made, with
// the size of what it wrote.
func (h *handle) statNew() (unix.Stat_t, error) {
	st, err := backing.Fstat(int(h.base.Fd()))
	if err != nil {
		return st, err
	}
	st.Size = int64(len(h.p.buf))
	if bs := int64(max(st.Blksize, 512)); st.Size > 0 {
		st.Blocks = (st.Size + bs - 1) / bs * bs / 512
		st.Mtim, st.Ctim = h.p.wroteAt, h.p.wroteAt
	}
	h.seen.Store(st.Size)
	return st, nil
}

// commitNew commits a new file's content (newFile). While the file its
// create made is still the committed version, empty, and no other handle
// has it open (a reader keeps the empty version it opened), the bytes are
// written into it as an append to nothing: the same journal record, so a
// crash cuts a torn write back to the empty file, and readers opening
// meanwhile wait for it (f.inPlace). Otherwise, and with durability=full
// (a new name needs its directory fsync'd, which a replace does with the
// rename's), the file is replaced like any rewrite.
func (h *handle) commitNew(g grant) (onBase bool, err error) {
	if !h.newInPlace() {
		if err := h.spill(); err != nil {
			return false, err
		}
		return false, h.commitWhole(g)
	}
	if len(h.p.buf) == 0 {
		h.p.discard(h.n.r) // the empty file is the new version
		return true, nil
	}
	return h.commitAppend(g)
}

func (h *handle) newInPlace() bool {
	f := h.n.f
	if h.n.r.opts.Durable || f.ver() != h.baseVer || f.handleCount() > 1 {
		return false
	}
	st, err := backing.Fstat(int(h.base.Fd()))
	return err == nil && st.Size == 0
}
