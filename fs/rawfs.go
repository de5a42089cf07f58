package fs

import (
	"context"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// rawFS marks a GETATTR that came without a file handle (stat, and
// fstat too: the kernel does not say which descriptor). go-fuse then
// passes the inode's first open handle, which may be another process's
// writer; such a GETATTR must describe the committed version instead.
type rawFS struct{ fuse.RawFileSystem }

// noFh is set in the caller's pid, which never reaches 2^31.
const noFh = 1 << 31

func (w rawFS) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	if in.Flags()&fuse.FUSE_GETATTR_FH == 0 {
		in.Caller.Pid |= noFh
	}
	return w.RawFileSystem.GetAttr(cancel, in, out)
}

// hasFh reports whether the request named its file handle.
func hasFh(ctx context.Context) bool {
	c, ok := fuse.FromContext(ctx)
	return !ok || c.Pid&noFh == 0
}
