package fs

import (
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// A small pending append (a CGI script's log line) is kept in memory
// until its commit writes it to the end of the file with one pwrite: its
// staging file cost a dozen system calls per append (write it, stat it
// three times, find its data, read it back, drop it) for a hundred bytes
// (README, commit speed). Anything that needs the pending version as a
// file (a read or stat through the handle, a truncation, a rejected
// commit) first spills the buffer to a staging file, which is then used
// as before. Not in a cluster: its recovery reads a cut-off append's
// staging file by name.
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

// bufferAppend keeps data in memory if this appender has no staging file
// and data fits; it reports whether it did. An empty write is not a
// change: it goes the old way, which does not count it.
func (h *handle) bufferAppend(data []byte) bool {
	r := h.n.r
	if len(data) == 0 || !h.append || h.atEnd || h.stage != nil || r.clustered() || h.mapped.Load() ||
		len(h.buf)+len(data) > appendBufMax || !r.appendBufs.take(len(data)) {
		return false
	}
	h.buf = append(h.buf, data...)
	return true
}

// spill moves the buffered appends to a staging file, as copyUp would
// make for an appender, without looking at base: a rejected commit
// spills while another holds the file's lock.
func (h *handle) spill() error {
	if len(h.buf) == 0 {
		return nil
	}
	f, nm, err := h.n.r.pool.takeNameless()
	if err != nil {
		return err
	}
	if _, err := unix.Pwrite(int(f.Fd()), h.buf, 0); err != nil {
		h.n.r.dropTemp(h.n.r.stagingfd, f, nm)
		return err
	}
	h.stage, h.stageNm = f, nm
	h.dropBuf()
	return nil
}

func (h *handle) dropBuf() {
	h.n.r.appendBufs.give(len(h.buf))
	h.buf = nil
}
