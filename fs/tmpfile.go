package fs

import (
	"context"
	"os"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/safefs/safefs/internal/backing"
)

// Tmpfile is open(2) with O_TMPFILE: a nameless file in the backing
// directory. Only its opener can reach it, so until it is linked into
// place its handle writes straight into it (no staging: there is no
// other reader to keep a version for).
func (n *Node) Tmpfile(ctx context.Context, flags, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	if n.r.opts.ReadOnly {
		return nil, nil, 0, syscall.EROFS
	}
	dir, err := n.writeDir()
	if err != nil {
		return nil, nil, 0, n.errno(err)
	}
	defer n.dropDir()
	if err := n.r.takeFile(ctx); err != nil {
		return nil, nil, 0, n.errno(err)
	}
	in, h, err := n.tmpfile(ctx, dir, flags, mode, out)
	if err != nil {
		n.r.files.Give(callerUID(ctx))
		return nil, nil, 0, n.errno(err)
	}
	return in, h, fuse.FOPEN_DIRECT_IO, 0
}

func (n *Node) tmpfile(ctx context.Context, dir int, flags, mode uint32, out *fuse.EntryOut) (*gofs.Inode, *handle, error) {
	fd, err := backing.TmpfileAt(dir, createMode(dir, mode)&07777)
	if err != nil {
		return nil, nil, err
	}
	f := os.NewFile(uintptr(fd), "tmpfile")
	st, err := backing.Fstat(fd)
	if err == nil {
		err = n.own(ctx, dir, fd)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	lf := n.r.ids.fresh(&st)
	fillAttr(&out.Attr, &st, lf.ino)
	in := n.NewInode(ctx, n.r.newNode(lf), lf.identity())
	h, err := in.Operations().(*Node).newHandle(ctx, f, lf.ver(), flags&^(syscall.O_TRUNC|syscall.O_APPEND), false)
	if err != nil {
		return nil, nil, err
	}
	h.private = true
	return in, h, nil
}

// linkPrivate names a file made by Tmpfile: linkat(2) of its descriptor.
// From then on others can open it, so its handles stage like any other.
func (n *Node) linkPrivate(t *Node, dir int, nm string) error {
	for _, h := range t.f.handleList() {
		if err := h.publishPrivate(dir, nm); err != syscall.ENOENT {
			return err
		}
	}
	return syscall.ENOENT // no open handle: the kernel would not link it
}

// publishPrivate links a private handle's file as dir/nm. ENOENT: the
// handle is not private.
func (h *handle) publishPrivate(dir int, nm string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.private || h.closed {
		return syscall.ENOENT
	}
	if err := backing.LinkFd(int(h.base.Fd()), dir, nm); err != nil {
		return err
	}
	h.private = false
	return nil
}
