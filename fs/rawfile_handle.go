package fs

import (
	"context"
	"errors"
	"os"
	"slices"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
)

// A raw file's opens, and its handles' operations: the backing inode's own
// (rawfile.go).

// openRaw is Open of a raw file. An open that reaches another node than
// the raw node is sent there (ESTALE, see roles.go), unless it is that
// retry.
func (n *Node) openRaw(ctx context.Context, flags uint32, tid uint32, retry bool) (gofs.FileHandle, uint32, syscall.Errno) {
	if !retry && n.rawSendOn() {
		n.r.refused.Note(tid)
		return nil, 0, syscall.ESTALE
	}
	if err := n.r.takeFile(ctx); err != nil {
		return nil, 0, n.errno(err)
	}
	mode := unix.O_RDONLY
	if isWrite(flags) {
		mode = unix.O_RDWR
	}
	if flags&syscall.O_APPEND != 0 {
		mode |= unix.O_APPEND
	}
	base, err := n.openCurrent(mode)
	if errors.Is(err, syscall.ENOENT) {
		base, err = n.f.openGhost(mode)
	}
	if errors.Is(err, syscall.ENOENT) {
		err = syscall.ESTALE // see open
	}
	var h *handle
	if err == nil {
		h, err = n.rawHandle(ctx, base, flags, false)
	}
	if err != nil {
		n.r.files.Give(callerUID(ctx))
		if errors.Is(err, syscall.ESTALE) {
			n.r.refused.Note(tid)
		}
		return nil, 0, n.errno(err)
	}
	return h, n.rawReply(ctx, h), 0
}

// rawHandle makes a raw handle on base, the file's backing inode, open
// with the open's mode. created: the caller's create made it.
func (n *Node) rawHandle(ctx context.Context, base *os.File, flags uint32, created bool) (*handle, error) {
	h := n.handleOn(ctx, base, n.f.ver(), flags)
	h.raw = true
	err := h.rawSetID(base)
	if err == nil && h.write && flags&syscall.O_TRUNC != 0 && !created {
		err = unix.Ftruncate(int(base.Fd()), 0)
	}
	if err != nil {
		base.Close()
		return nil, err
	}
	n.f.addHandle(h)
	n.r.count.rawOpens.Add(1)
	return h, nil
}

// rawSendOn reports whether an open of raw n must go to the raw node:
// the kernel's retry looks the name up again, and lookups give the raw
// node's generation (f.mu not held).
func (n *Node) rawSendOn() bool {
	f := n.f
	f.mu.Lock()
	defer f.mu.Unlock()
	return !n.rawNode()
}

// rawNode reports whether n is its raw file's raw node (f.mu held).
func (n *Node) rawNode() bool {
	return !n.r.opts.VersionCache || n.rl.gen == n.f.rw.gen
}

// rawSetID takes set-uid (and set-gid) off a raw file that h, a non-root
// caller's writer, is to write through f, before any write: the daemon
// writes as root, and so does the kernel for a passed-through write (with
// the daemon's credentials), so neither would clear them (contract 11).
func (h *handle) rawSetID(f *os.File) error {
	if !h.write || h.uid == 0 {
		return nil
	}
	st, err := backing.Fstat(int(f.Fd()))
	if err != nil {
		return err
	}
	return h.dropSetID(f, &st)
}

// rawReply is the OPEN reply's flags for raw handle h on n. On the raw
// node: the file's backing inode passed through (cache=version only:
// with one node per file, an open decided before the file was raw may
// still be on its way), else the node's page cache, kept from one open
// to the next while another is open (daemon-side writes drop what they
// change: rawChanged). Elsewhere (a retry that missed the raw node, or
// cache=direct while a reader's version is passed through), direct I/O.
func (n *Node) rawReply(ctx context.Context, h *handle) uint32 {
	f := n.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if n.rl.pt.id != 0 {
		n.ptShare(ctx, h) // a reader's node: every open shares its backing
		return fuse.FOPEN_DIRECT_IO
	}
	if f.pt.open > 0 {
		// cache=direct: a reader passed through before the file became
		// raw (passthrough.go); every open of the inode shares its backing.
		f.pt.open++
		h.pt = true
		if cancel, ok := replyOf(ctx); ok {
			n.r.pt.ids.Store(cancel, f.pt.id)
		}
		return fuse.FOPEN_DIRECT_IO
	}
	if !n.rawNode() || n.rl.cached > 0 {
		return fuse.FOPEN_DIRECT_IO
	}
	switch n.rl.rawMode {
	case rawUndecided:
		if n.r.opts.VersionCache && n.rawBacking(ctx, h) {
			n.rl.rawMode = rawPassthrough
			return 0
		}
		n.rl.rawMode = rawPageCache
	case rawPassthrough:
		// No passthrough file of n is open if this fails (the backing
		// is registered while any is): direct I/O is then allowed.
		if n.rawBacking(ctx, h) {
			return 0
		}
		return fuse.FOPEN_DIRECT_IO
	}
	keep := n.rl.rawCached > 0
	n.rl.rawCached++
	f.rw.cached++
	h.rawCached = true
	if keep {
		return fuse.FOPEN_KEEP_CACHE
	}
	return 0 // no other open kept its pages up to date: dropped at this open
}

// rawBacking gives h's open the file's backing inode as its backing file,
// registered at the first such open (f.mu held). false: passthrough is
// off or unavailable.
func (n *Node) rawBacking(ctx context.Context, h *handle) bool {
	r, f := n.r, n.f
	if !r.opts.Passthrough || r.pt.off.Load() {
		return false
	}
	cancel, ok := replyOf(ctx)
	if !ok {
		return false
	}
	if f.rw.ptID == 0 {
		// Writable whatever h's mode: every open of the inode shares
		// it, and the kernel checks each file's own mode.
		fd, err := unix.Open(backing.ProcPath(int(h.base.Fd())), unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			r.log.Warn("raw: backing file not opened for passthrough: served through the page cache",
				zap.String("path", logPath(n.path())), zap.Error(err))
			return false
		}
		pt := os.NewFile(uintptr(fd), "raw")
		id, ok := r.ptBacking(pt)
		if !ok {
			pt.Close()
			return false
		}
		f.rw.pt, f.rw.ptID = pt, id
	}
	f.rw.open++
	h.rawPt = true
	r.pt.ids.Store(cancel, f.rw.ptID)
	return true
}

// rawReleased drops h's count on the file's raw backing file, the last
// one unregisters it (the kernel keeps it while a file of it is open),
// or on its node's page cache.
func (h *handle) rawReleased() {
	if !h.rawPt && !h.rawCached {
		return
	}
	f := h.n.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if h.rawCached {
		h.rawCached = false
		h.n.rl.rawCached--
		f.rw.cached--
		return
	}
	h.rawPt = false
	if f.rw.open--; f.rw.open > 0 {
		return
	}
	h.n.r.ptUnregister(f.rw.ptID)
	f.rw.pt.Close()
	f.rw.pt, f.rw.ptID = nil, 0
}

func (h *handle) rawRead(dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n, err := unix.Pread(int(h.base.Fd()), dest, off)
	if err != nil {
		return nil, h.errno(err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

// rawWrite writes at off, or at the end for an appender (base is open
// O_APPEND).
func (h *handle) rawWrite(data []byte, off int64) (uint32, syscall.Errno) {
	if err := h.n.r.roomFor(h.uid, int64(len(data))); err != nil {
		return 0, h.errno(err)
	}
	n, err := unix.Pwrite(int(h.base.Fd()), data, off)
	if n > 0 {
		h.rawChanged(off, int64(n))
	}
	return uint32(max(n, 0)), h.errno(err)
}

// rawChanged drops the pages of [off, off+size) (size 0: to the end)
// that nodes serving the raw file from their page cache hold, after a
// change that did not go through that cache: the kernel updates a node's
// pages with the writes made through it, not with the daemon's.
func (h *handle) rawChanged(off, size int64) {
	f := h.n.f
	f.mu.Lock()
	if f.rw.cached == 0 {
		f.mu.Unlock()
		return
	}
	var nodes []*Node
	for o := range f.handles {
		if o.rawCached && !(h.rawCached && o.n == h.n) && !slices.Contains(nodes, o.n) {
			nodes = append(nodes, o.n)
		}
	}
	f.mu.Unlock()
	for _, n := range nodes {
		// ENOENT: the kernel has forgotten it, nothing to drop.
		_ = n.NotifyContent(off, size)
	}
}

// fsyncDataOnly is FUSE_FSYNC_FDATASYNC in a FSYNC request's flags.
const fsyncDataOnly = 1

// rawTruncate is ftruncate of the backing inode.
func (h *handle) rawTruncate(size int64) error {
	if err := unix.Ftruncate(int(h.base.Fd()), size); err != nil {
		return err
	}
	h.rawChanged(size, 0)
	return nil
}

// rawAllocate is fallocate of the backing inode (a hole punched, a range
// zeroed: pages change).
func (h *handle) rawAllocate(mode uint32, off, size int64) syscall.Errno {
	if err := unix.Fallocate(int(h.base.Fd()), mode, off, size); err != nil {
		return h.errno(err)
	}
	h.rawChanged(off, size)
	return 0
}

// rawSync is fsync (fdatasync if datasync) of the backing inode.
func (h *handle) rawSync(datasync bool) syscall.Errno {
	if datasync {
		return h.errno(unix.Fdatasync(int(h.base.Fd())))
	}
	return h.errno(h.base.Sync())
}

// rawTruncatePath is truncate(path) of a raw file: in place.
func (n *Node) rawTruncatePath(size uint64) error {
	f, err := n.openCurrent(unix.O_WRONLY)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Ftruncate(int(f.Fd()), int64(size))
}
