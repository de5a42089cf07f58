package fs

import (
	"context"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/safefs/safefs/internal/fuseprocs"
)

// rawFS marks a GETATTR that came without a file handle (stat, and
// fstat too: the kernel does not say which descriptor). go-fuse then
// passes the inode's first open handle, which may be another process's
// writer; such a GETATTR must describe the committed version instead.
// Its frequent requests yield the processor now and then (fuseprocs).
type rawFS struct {
	fuse.RawFileSystem
	locks bool    // script locks: unlocks at close and release (locks.go)
	pt    *ptRoot // passthrough: backing IDs for OPEN replies
	cands *candidates
}

// noFh is set in the caller's pid, which never reaches 2^31.
const noFh = 1 << 31

func (w rawFS) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	fuseprocs.YieldNowAndThen()
	defer w.cands.settle(cancel)
	return w.RawFileSystem.Lookup(cancel, h, name, out)
}

func (w rawFS) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	fuseprocs.YieldNowAndThen()
	if in.Flags()&fuse.FUSE_GETATTR_FH == 0 {
		in.Caller.Pid |= noFh
	}
	return w.RawFileSystem.GetAttr(cancel, in, out)
}

// A READ without a lock owner fills the page cache: every open is direct
// I/O, whose reads carry one, so this is a shared map's page fault. It
// is marked with the same bit (see fillsPages).
func (w rawFS) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	fuseprocs.YieldNowAndThen()
	if in.ReadFlags&fuse.READ_LOCKOWNER == 0 {
		in.Caller.Pid |= noFh
	}
	return w.RawFileSystem.Read(cancel, in, buf)
}

// A WRITE from the page cache (a shared map's dirty pages) is marked with
// the same bit: the kernel drops no cached size for it, as it does for a
// write(2), only the times once the writeback ends (see uncache).
func (w rawFS) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	fuseprocs.YieldNowAndThen()
	if in.WriteFlags&fuse.WRITE_CACHE != 0 {
		in.Caller.Pid |= noFh
	}
	return w.RawFileSystem.Write(cancel, in, data)
}

// fillsPages reports whether a READ fills the page cache for a map.
func fillsPages(ctx context.Context) bool { return !hasFh(ctx) }

// hasFh reports whether the request named its file handle.
func hasFh(ctx context.Context) bool {
	c, ok := fuse.FromContext(ctx)
	return !ok || c.Pid&noFh == 0
}

// With CAP_DONT_MASK the kernel leaves the caller's umask to us (see
// createMode): the node operations get only a mode, so the umask rides
// in its unused high bits.
const (
	umaskSent  = 1 << 31
	umaskShift = 16
)

func withUmask(mode, umask uint32) uint32 {
	return mode&0xffff | umaskSent | (umask&0o777)<<umaskShift
}

// splitUmask undoes withUmask; a mode that came without one is taken as
// masked already (umask 0).
func splitUmask(mode uint32) (uint32, uint32) {
	if mode&umaskSent == 0 {
		return mode, 0
	}
	return mode & 0xffff, mode >> umaskShift & 0o777
}

func (w rawFS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	fuseprocs.YieldNowAndThen()
	in.Mode = withUmask(in.Mode, in.Umask)
	defer w.cands.settle(cancel)
	st := w.RawFileSystem.Create(cancel, in, name, out)
	w.pt.ptReply(cancel, &out.OpenOut)
	return st
}

func (w rawFS) Tmpfile(cancel <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	in.Mode = withUmask(in.Mode, in.Umask)
	return w.RawFileSystem.Tmpfile(cancel, in, out)
}

func (w rawFS) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	in.Mode = withUmask(in.Mode, in.Umask)
	defer w.cands.settle(cancel)
	return w.RawFileSystem.Mkdir(cancel, in, name, out)
}

func (w rawFS) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	in.Mode = withUmask(in.Mode, in.Umask)
	defer w.cands.settle(cancel)
	return w.RawFileSystem.Mknod(cancel, in, name, out)
}

func (w rawFS) Symlink(cancel <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	defer w.cands.settle(cancel)
	return w.RawFileSystem.Symlink(cancel, h, target, name, out)
}

func (w rawFS) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	defer w.cands.settle(cancel)
	return w.RawFileSystem.Link(cancel, in, name, out)
}
