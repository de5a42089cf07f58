package fs

import (
	"context"
	"os"
	"sync"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// handle is one open file. A reader reads the version it opened. A
// writer reads the latest committed version until its first write, then
// works on a private staging copy that a commit publishes whole.
type handle struct {
	n *Node

	mu       sync.Mutex
	write    bool
	append   bool
	uid, gid uint32 // the opener, for set-id handling at commit

	first   *os.File // the version opened at open; kept until release
	base    *os.File // committed version: what reads see without staging
	baseVer uint64   // f.version when base was opened
	stage   *os.File // pending version, nil when clean
	stageNm string
	dirty   bool // stage holds changes no commit has published
}

var (
	_ gofs.FileReader    = (*handle)(nil)
	_ gofs.FileWriter    = (*handle)(nil)
	_ gofs.FileFlusher   = (*handle)(nil)
	_ gofs.FileFsyncer   = (*handle)(nil)
	_ gofs.FileReleaser  = (*handle)(nil)
	_ gofs.FileAllocater = (*handle)(nil)
	_ gofs.FileLseeker   = (*handle)(nil)
)

func (h *handle) errno(err error) syscall.Errno { return h.n.errno(err) }

// refresh reopens base when a commit published a newer version and this
// handle has no pending version of its own: a writer that has not
// written yet reads the latest committed version.
func (h *handle) refresh() error {
	f := h.n.f
	f.mu.Lock()
	ver := f.version
	f.mu.Unlock()
	if !h.write || h.stage != nil || ver == h.baseVer {
		return nil
	}
	fd, err := h.n.openCurrent(h.baseFlags())
	if err != nil {
		return err
	}
	h.setBase(fd, ver)
	return nil
}

func (h *handle) baseFlags() int {
	if h.write {
		return unix.O_RDWR
	}
	return unix.O_RDONLY
}

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.refresh(); err != nil {
		return nil, h.errno(err)
	}
	src := h.base
	if h.stage != nil && !h.append {
		src = h.stage
	}
	n, err := unix.Pread(int(src.Fd()), dest, off)
	if err != nil {
		return nil, h.errno(err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

// copyUp gives the handle its staging file: a copy of the latest
// committed version, or empty for O_TRUNC and appends.
func (h *handle) copyUp(empty bool) error {
	if h.stage != nil {
		return nil
	}
	if err := h.refresh(); err != nil {
		return err
	}
	st, nm, err := newTemp(h.n.r.stagingfd)
	if err != nil {
		return err
	}
	if !empty {
		if err := copyData(st, h.base); err != nil {
			h.n.r.dropTemp(h.n.r.stagingfd, st, nm)
			return err
		}
	}
	h.stage, h.stageNm = st, nm
	return nil
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.copyUp(h.append); err != nil {
		return 0, h.errno(err)
	}
	if h.append {
		// The kernel's offset comes from its cached size: appends go
		// after this handle's own pending bytes, placed at commit.
		st, err := fstat(int(h.stage.Fd()))
		if err != nil {
			return 0, h.errno(err)
		}
		off = st.Size
	}
	n, err := unix.Pwrite(int(h.stage.Fd()), data, off)
	if n > 0 {
		h.dirty = true
	}
	if err != nil {
		return uint32(max(n, 0)), h.errno(err)
	}
	return uint32(n), 0
}

// truncate is ftruncate on this handle: a change like a write.
func (h *handle) truncate(size uint64) error {
	if err := h.copyUp(size == 0); err != nil {
		return err
	}
	if err := unix.Ftruncate(int(h.stage.Fd()), int64(size)); err != nil {
		return err
	}
	h.dirty = true
	return nil
}

func (h *handle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.copyUp(false); err != nil {
		return h.errno(err)
	}
	if err := unix.Fallocate(int(h.stage.Fd()), mode, int64(off), int64(size)); err != nil {
		return h.errno(err)
	}
	h.dirty = true
	return 0
}

func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	src := h.base
	if h.stage != nil && !h.append {
		src = h.stage
	}
	n, err := unix.Seek(int(src.Fd()), int64(off), int(whence))
	if err != nil {
		return 0, h.errno(err)
	}
	return uint64(n), 0
}

// stat shows the committed file's identity and mode with the pending
// version's size and times, so fstat on a writer sees its own writes.
func (h *handle) stat() (unix.Stat_t, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st, err := h.n.stat()
	if err != nil {
		if st, err = fstat(int(h.base.Fd())); err != nil {
			return st, err
		}
	}
	if h.stage == nil || h.append {
		return st, nil
	}
	ps, err := fstat(int(h.stage.Fd()))
	if err != nil {
		return st, err
	}
	st.Size, st.Blocks, st.Mtim, st.Ctim = ps.Size, ps.Blocks, ps.Mtim, ps.Ctim
	return st, nil
}

// Flush is close(): it commits pending changes, unless the closing
// process is being killed by a signal.
func (h *handle) Flush(ctx context.Context) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.dirty {
		return 0
	}
	if h.n.r.opts.KillCheck {
		if c, ok := fuse.FromContext(ctx); ok && killedBySignal(c.Pid) {
			h.n.r.killed.Add(1)
			h.n.r.log.Info("writer killed by a signal: not committed", zap.String("path", h.n.path()))
			h.discard()
			return 0
		}
	}
	return h.errno(h.commit())
}

func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.dirty {
		return h.errno(h.commit())
	}
	return h.errno(h.base.Sync())
}

// Release commits only what no Flush committed (e.g. no FLUSH was sent).
func (h *handle) Release(ctx context.Context) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.dirty {
		if err := h.commit(); err != nil {
			h.n.r.log.Warn("commit at release failed")
		}
	}
	h.discard()
	h.n.f.dropHandle(h)
	h.setBase(nil, 0)
	h.first.Close()
	return 0
}

// setBase replaces base, closing the old one unless it is first.
func (h *handle) setBase(f *os.File, ver uint64) {
	if h.base != h.first {
		h.base.Close()
	}
	h.base, h.baseVer = f, ver
}

// discard drops the pending version.
func (h *handle) discard() {
	if h.stage != nil {
		h.n.r.dropTemp(h.n.r.stagingfd, h.stage, h.stageNm)
	}
	h.stage, h.stageNm, h.dirty = nil, "", false
}
