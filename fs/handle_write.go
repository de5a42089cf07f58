package fs

import (
	"context"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
	"github.com/safefs/safefs/internal/staging"
)

// copyUp gives the handle its staging file: a copy of the latest
// committed version, or empty for O_TRUNC and appends.
func (h *handle) copyUp(empty bool) error {
	if err := h.spill(); err != nil {
		return err
	}
	if h.p.stage != nil {
		return nil
	}
	if err := h.refresh(); err != nil {
		return err
	}
	if !empty {
		bs, err := backing.Fstat(int(h.base.Fd()))
		if err != nil {
			return err
		}
		// A file just created has nothing to copy (a create's first
		// write): skip the clone attempt and two truncations.
		empty = bs.Size == 0
		if err := h.n.r.roomFor(h.uid, bs.Blocks*512); err != nil {
			return err
		}
	}
	take := h.n.r.pool.Take
	if empty && h.p.appends() && !h.n.r.clustered() {
		// A cluster's recovery reads a cut-off append's staging file
		// by its name (journal settleAppend).
		take = h.n.r.pool.TakeNameless
	}
	st, nm, err := take()
	if err != nil {
		return err
	}
	if !empty {
		if err := staging.CopyData(st, h.base); err != nil {
			h.n.r.dropTemp(h.n.r.stagingfd, st, nm)
			return err
		}
	}
	h.p.stage, h.p.stageNm = st, nm
	return nil
}

// roomForCopy checks there is room for the daemon to copy f's data for
// this handle's user.
func (h *handle) roomForCopy(f *os.File) error {
	st, err := backing.Fstat(int(f.Fd()))
	if err != nil {
		return err
	}
	return h.n.r.roomFor(h.uid, st.Blocks*512)
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.flushed.Store(false)
	if h.private {
		n, err := unix.Pwrite(int(h.base.Fd()), data, off)
		return uint32(max(n, 0)), h.errno(err)
	}
	if h.raw {
		return h.rawWrite(data, off)
	}
	if err := h.n.r.roomFor(h.uid, int64(len(data))); err != nil {
		return 0, h.errno(err)
	}
	h.rmwWrite()
	if h.bufferWrite(data, off) {
		h.wroteBytes(ctx)
		h.wroteAppend(int64(len(h.p.buf)))
		return uint32(len(data)), 0
	}
	if err := h.spill(); err != nil {
		return 0, h.errno(err)
	}
	if err := h.copyUp(h.p.appends()); err != nil {
		return 0, h.errno(err)
	}
	if h.p.mode != noAppend {
		// The kernel's offset comes from its cached size: appends go
		// after this handle's own pending bytes, placed at commit.
		st, err := backing.Fstat(int(h.p.stage.Fd()))
		if err != nil {
			return 0, h.errno(err)
		}
		off = st.Size
	}
	n, err := unix.Pwrite(int(h.p.stage.Fd()), data, off)
	if n > 0 {
		h.wroteBytes(ctx)
		h.writeBehind(off + int64(n))
		h.wroteAppend(off + int64(n))
	}
	if err != nil {
		return uint32(max(n, 0)), h.errno(err)
	}
	return uint32(n), 0
}

// wroteBytes records a write that put bytes in the pending version,
// buffered or staged.
func (h *handle) wroteBytes(ctx context.Context) {
	h.wrote = h.wrote || hasFh(ctx)
	h.changed()
	h.noteSize()
}

// changed records a change made by the handle's user: pending, and
// neither left by a killed process nor only the open's O_TRUNC.
func (h *handle) changed() {
	h.settled.Store(0)
	h.p.state, h.p.killed = modified, false
}

// truncate is ftruncate on this handle: a change like a write.
func (h *handle) truncate(size uint64) error {
	if h.raw {
		return h.rawTruncate(int64(size))
	}
	if h.private {
		return unix.Ftruncate(int(h.base.Fd()), int64(size))
	}
	if err := h.spill(); err != nil {
		return err
	}
	if err := h.unappend(size == 0); err != nil {
		return err
	}
	if err := h.copyUp(size == 0); err != nil {
		return err
	}
	// Also on an empty staging file: a truncation sets mtime and ctime
	// to now, and one the pool made ahead has older times.
	if err := unix.Ftruncate(int(h.p.stage.Fd()), int64(size)); err != nil {
		return err
	}
	h.changed()
	h.noteSize()
	return nil
}

// unappend makes an appender's pending version whole: the committed file
// followed by its pending appends (nothing when empty). ftruncate and
// fallocate on an O_APPEND descriptor act on the whole file, so its close
// then replaces the file, as any rewrite does: appends that others commit
// meanwhile are not in it. Its later writes go to the end of its version.
func (h *handle) unappend(empty bool) error {
	if !h.p.appends() {
		return nil
	}
	if err := h.spill(); err != nil {
		return err
	}
	appends, appendsNm := h.p.stage, h.p.stageNm
	// Whole while copyUp makes its staging file: named, as a replace needs.
	h.p.stage, h.p.stageNm, h.p.mode = nil, "", noAppend
	err := h.copyUp(empty)
	if err == nil && appends != nil && !empty {
		err = staging.AppendTo(h.p.stage, appends)
	}
	if err != nil {
		if h.p.stage != nil {
			h.n.r.dropTemp(h.n.r.stagingfd, h.p.stage, h.p.stageNm)
		}
		h.p.stage, h.p.stageNm, h.p.mode = appends, appendsNm, appending
		return err
	}
	if appends != nil {
		h.n.r.dropTemp(h.n.r.stagingfd, appends, appendsNm)
	}
	h.p.mode = atEnd
	return nil
}

func (h *handle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.raw {
		return h.rawAllocate(mode, int64(off), int64(size))
	}
	if h.private {
		return h.errno(unix.Fallocate(int(h.base.Fd()), mode, int64(off), int64(size)))
	}
	if err := h.n.r.roomFor(h.uid, int64(size)); err != nil {
		return h.errno(err)
	}
	if err := h.unappend(false); err != nil {
		return h.errno(err)
	}
	if err := h.copyUp(false); err != nil {
		return h.errno(err)
	}
	if err := unix.Fallocate(int(h.p.stage.Fd()), mode, int64(off), int64(size)); err != nil {
		return h.errno(err)
	}
	h.changed()
	h.noteSize()
	return 0
}
