package fs

import (
	"errors"
	"os"
	"syscall"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
	"github.com/safefs/safefs/internal/proc"
	"github.com/safefs/safefs/internal/staging"
	"github.com/safefs/safefs/journal"
)

// commitAppend writes the pending appends at the end of the file in
// place. It reports whether it wrote through base (then the version
// committed).
func (h *handle) commitAppend(g grant) (onBase bool, err error) {
	r := h.n.r
	v, err := h.locateBase(g)
	if errors.Is(err, errUnlinked) {
		h.p.state = clean
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer v.release()
	target, st, onBase, err := h.appendTarget(v)
	if err != nil {
		return false, err
	}
	if !onBase {
		defer target.Close()
	}
	if h.p.newFile && (!onBase || st.Size != 0) {
		// Not the empty file its create made: changed in BACKING.
		return false, syscall.ESTALE
	}
	fd := int(target.Fd())
	n, crc, err := h.pendingAppend()
	if err != nil {
		return false, err
	}
	if err := g.Check(); err != nil {
		return false, err
	}
	rec := journal.Record{Kind: journal.Append, Target: h.n.path(), Dev: uint64(st.Dev), Ino: st.Ino,
		OldSize: st.Size, Len: n, CRC: crc, Rev: g.Token()}
	if r.clustered() {
		// Recovery tells its own partial bytes from other daemons'
		// appends by them (journal settleAppend).
		rec.Staging = h.p.stageNm
	}
	if h.redo(n) {
		rec.Kind, rec.Data = journal.RedoAppend, h.p.buf
	}
	at := crashKind(rec)
	e, err := r.jr.Begin(rec)
	if err != nil {
		return false, err
	}
	if err := h.dropSetID(target, &st); err != nil {
		return false, h.undoAppend(e, fd, st.Size, err)
	}
	r.crash(at + "-begun")
	if err := g.fence(""); err != nil {
		// Not ours any more: another daemon may be appending now, so
		// the file is left alone (no cut back).
		_ = e.Abort()
		return false, err
	}
	err = h.writeAppend(target, st.Size, n, g, at)
	if err == nil {
		r.crash(at + "-written")
		if rec.Redo() {
			// Committed: the record is durable with the bytes.
			h.p.discard(h.n.r)
			return onBase, r.redoQueued(keyOf(&st), fd, e, int(n))
		}
		if r.opts.Durable {
			err = unix.Fdatasync(fd)
		}
	}
	if err != nil {
		return false, h.undoAppend(e, fd, st.Size, err)
	}
	r.crash("append-synced")
	// The appended bytes are durable: an open record would verify them
	// by CRC and keep them, so its end line need not be (yet). Not in a
	// cluster: other daemons' renames of the path do not wait for it.
	if r.clustered() {
		err = e.Commit()
	} else {
		err = e.CommitLazy()
	}
	r.crash("append-ended")
	h.p.discard(h.n.r)
	return onBase, err
}

// locateBase is locate for a commit that writes through the handle's
// own base: when base is the committed version and a name of the file
// still leads to it, a stat of the name checks it and no O_PATH fd is
// opened (v.fd is -1, v.st base's stat): two system calls fewer per
// append. Otherwise, as locate.
func (h *handle) locateBase(g grant) (named, error) {
	if h.base == nil || !h.write || h.private || h.n.r.clustered() {
		return h.n.locate(g)
	}
	bs, err := backing.Fstat(int(h.base.Fd()))
	if err != nil || !h.n.r.ids.owns(h.n.f, keyOf(&bs)) {
		return h.n.locate(g)
	}
	v, ok := h.n.statName(func(_ name, st *unix.Stat_t) bool { return keyOf(st) == keyOf(&bs) })
	if !ok {
		return h.n.locate(g)
	}
	if _, err := v.in.writeDir(); err != nil {
		return noName, err
	}
	v.in.dropDir()
	v.st = bs
	return v, nil
}

// appendTarget opens the located version for writing, with its stat. A
// writer's base is open for writing and follows the committed version:
// when it is v's inode it serves, saving an open through /proc. onBase
// tells the caller not to close it.
func (h *handle) appendTarget(v named) (target *os.File, st unix.Stat_t, onBase bool, err error) {
	if v.fd < 0 {
		return h.base, v.st, true, nil // located through base (locateBase)
	}
	if h.base != nil && h.write && !h.private {
		st, err = backing.Fstat(int(h.base.Fd()))
		if err == nil && keyOf(&st) == keyOf(&v.st) {
			return h.base, st, true, nil
		}
	}
	target, err = v.reopen(unix.O_WRONLY)
	if err != nil {
		return nil, st, false, err
	}
	st, err = backing.Fstat(int(target.Fd()))
	if err != nil {
		target.Close()
		return nil, st, false, err
	}
	return target, st, false, nil
}

// pendingAppend returns the size and CRC of the pending appends, after
// checking there is room for the daemon to write them for the handle's
// user.
func (h *handle) pendingAppend() (int64, uint32, error) {
	if h.p.stage == nil {
		n := int64(len(h.p.buf))
		return n, journal.Checksum(h.p.buf), h.n.r.roomFor(h.uid, n)
	}
	ps, err := backing.Fstat(int(h.p.stage.Fd()))
	if err != nil {
		return 0, 0, err
	}
	if err := h.n.r.roomFor(h.uid, ps.Blocks*512); err != nil {
		return 0, 0, err
	}
	crc, err := journal.CRC(h.p.stage, 0, ps.Size)
	return ps.Size, crc, err
}

// writeAppend writes the n pending bytes at the end of target (at size).
// Buffered bytes (at most appendBufMax), and staged ones up to
// appendAtomicMax (an appender's published lines: appendpub.go), are
// written under f.inPlace, so readers through the mount see all of them
// or none.
func (h *handle) writeAppend(target *os.File, size, n int64, g grant, at string) error {
	if h.p.stage == nil || n <= appendAtomicMax {
		h.n.f.inPlace.Lock()
		defer h.n.f.inPlace.Unlock()
	}
	if h.n.r.crashAt == at+"-half" || h.n.r.atPoint.Load() != nil {
		_ = h.copyAppendPart(target, size, 0, n/2)
		h.n.r.crash(at + "-half")
	}
	return h.copyAppend(target, size, n, g)
}

// appendChunk is how much an append copies between checks that its
// closer is still alive.
const appendChunk = 64 << 20

// errCloserKilled: the process whose close() commits was killed meanwhile.
var errCloserKilled = errors.New("writer killed by a signal during its commit")

// copyAppend copies the n pending bytes to the end of target (at size),
// giving up if the closing process is killed meanwhile: a killed writer
// does not commit, and must not keep the lock while a long copy runs.
// A cluster lock is fenced again before each chunk, so that a long copy
// does not outlive the lease's margin.
func (h *handle) copyAppend(target *os.File, size, n int64, g grant) error {
	for off := int64(0); off < n; off += appendChunk {
		if off > 0 && h.closer != 0 && h.n.r.opts.KillCheck && proc.KilledBySignal(h.closer) {
			return errCloserKilled
		}
		if off > 0 && h.n.r.clustered() {
			if err := g.fence(""); err != nil {
				return err
			}
		}
		if err := h.copyAppendPart(target, size+off, off, min(appendChunk, n-off)); err != nil {
			return err
		}
	}
	return nil
}

// copyAppendPart writes n pending bytes from src on, at dst in target:
// from the buffer or the staging file.
func (h *handle) copyAppendPart(target *os.File, dst, src, n int64) error {
	if h.p.stage != nil {
		return staging.CopyRange(target, dst, h.p.stage, src, n)
	}
	_, err := target.WriteAt(h.p.buf[src:src+n], dst)
	return err
}

// undoAppend cuts a failed append back. If even that fails, the record
// stays open so that the next recovery cuts it back.
func (h *handle) undoAppend(e *journal.Entry, fd int, size int64, why error) error {
	if err := unix.Ftruncate(fd, size); err != nil {
		h.n.r.log.Error("append failed and could not be cut back; recovery at next mount will",
			zap.String("path", h.n.path()), zap.Error(err))
		return why
	}
	_ = e.Abort()
	return why
}
