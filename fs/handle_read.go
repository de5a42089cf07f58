package fs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
)

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.flushed.Store(false)
	if h.raw {
		return h.rawRead(dest, off)
	}
	h.rmw.read = true
	if err := h.refresh(); err != nil {
		return nil, h.errno(err)
	}
	if fillsPages(ctx) && !h.mapped.Load() && !h.cached {
		h.mapped.Store(true)
		h.settled.Store(0)
		h.n.f.ptMapped()
		h.noteSize()
	}
	h.n.f.inPlace.RLock()
	n, err := h.pread(dest, off)
	h.n.f.inPlace.RUnlock()
	if err != nil {
		return nil, h.errno(err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

// pread reads what this handle sees: its pending version, or for an
// appender the committed file followed by its pending appends.
func (h *handle) pread(dest []byte, off int64) (int, error) {
	if err := h.spill(); err != nil {
		return 0, err
	}
	if h.p.stage == nil {
		return unix.Pread(int(h.base.Fd()), dest, off)
	}
	if !h.p.appends() {
		return unix.Pread(int(h.p.stage.Fd()), dest, off)
	}
	st, err := backing.Fstat(int(h.base.Fd()))
	if err != nil {
		return 0, err
	}
	if off >= st.Size {
		return unix.Pread(int(h.p.stage.Fd()), dest, off-st.Size)
	}
	n, err := unix.Pread(int(h.base.Fd()), dest[:min(int64(len(dest)), st.Size-off)], off)
	if err != nil || n < len(dest) && off+int64(n) < st.Size {
		return n, err
	}
	m, err := unix.Pread(int(h.p.stage.Fd()), dest[n:], 0)
	return n + max(m, 0), err
}

func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.spillNew(); err != nil {
		return 0, h.errno(err)
	}
	src := h.base
	if h.p.stage != nil && !h.p.appends() {
		src = h.p.stage
	}
	n, err := unix.Seek(int(src.Fd()), int64(off), int(whence))
	if err != nil {
		return 0, h.errno(err)
	}
	return uint64(n), 0
}

// stat describes what this handle reads: the version it opened (a
// writer: the latest), with the size and times of its pending version.
func (h *handle) stat() (unix.Stat_t, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.statLocked()
}

func (h *handle) statLocked() (unix.Stat_t, error) {
	if h.closed {
		return unix.Stat_t{}, syscall.EBADF
	}
	if h.raw {
		return backing.Fstat(int(h.base.Fd()))
	}
	if err := h.refresh(); err != nil {
		return unix.Stat_t{}, err
	}
	if h.p.newFile {
		return h.statNew()
	}
	if err := h.spill(); err != nil {
		return unix.Stat_t{}, err
	}
	h.n.f.inPlace.RLock()
	st, err := backing.Fstat(int(h.base.Fd()))
	h.n.f.inPlace.RUnlock()
	if err != nil || h.p.stage == nil {
		if err == nil {
			h.seen.Store(st.Size)
		}
		return st, err
	}
	ps, err := backing.Fstat(int(h.p.stage.Fd()))
	if err != nil {
		return st, err
	}
	if h.p.appends() {
		st.Size, st.Blocks = st.Size+ps.Size, st.Blocks+ps.Blocks
	} else {
		st.Size, st.Blocks = ps.Size, ps.Blocks
	}
	st.Mtim, st.Ctim = ps.Mtim, ps.Ctim
	if h.p.dirty() {
		// A non-root writer's change drops set-id bits (at its commit:
		// keptMode), as a write does at once on a local file system.
		st.Mode = st.Mode&^07777 | h.keptMode(st.Mode)
	}
	h.seen.Store(st.Size)
	return st, nil
}
