package fs

import (
	"context"
	"errors"
	"os"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// openCurrent opens the current committed version of a regular file.
func (n *Node) openCurrent(flags int) (*os.File, error) {
	dir, nm, err := n.where()
	if err != nil {
		return nil, err
	}
	return openRegular(dir, nm, flags)
}

// openRegular opens dir/nm only if it is a regular file: it is looked at
// through O_PATH first, so a FIFO or device planted in BACKING is never
// opened (no hang, no side effect), then that very inode is reopened.
func openRegular(dir int, nm string, flags int) (*os.File, error) {
	fd, err := openAt(dir, nm, unix.O_PATH, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	st, err := fstat(fd)
	if err != nil {
		return nil, err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		return nil, syscall.EISDIR
	case unix.S_IFLNK:
		return nil, syscall.ELOOP
	default:
		return nil, syscall.ENXIO
	}
	rfd, err := unix.Open(procPath(fd), flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(rfd), nm), nil
}

func isWrite(flags uint32) bool {
	return flags&syscall.O_ACCMODE != syscall.O_RDONLY
}

// newHandle opens a handle on the file's current version. Writers get
// direct I/O so that their pending bytes never enter the page cache
// shared by every handle of the kernel inode; readers too, so an old
// reader never sees pages of a newer version.
func (n *Node) newHandle(ctx context.Context, base *os.File, flags uint32) (*handle, error) {
	h := &handle{n: n, write: isWrite(flags), append: flags&syscall.O_APPEND != 0, first: base, base: base}
	if c, ok := fuse.FromContext(ctx); ok {
		h.uid, h.gid = c.Uid, c.Gid
	}
	n.f.mu.Lock()
	h.baseVer = n.f.version
	n.f.mu.Unlock()
	if h.write && flags&syscall.O_TRUNC != 0 {
		if err := h.truncate(0); err != nil {
			base.Close()
			return nil, err
		}
	}
	n.f.addHandle(h)
	return h, nil
}

func (n *Node) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if isWrite(flags) && n.r.opts.ReadOnly {
		return nil, 0, syscall.EROFS
	}
	mode := unix.O_RDONLY
	if isWrite(flags) {
		mode = unix.O_RDWR
	}
	base, err := n.openCurrent(mode)
	if err != nil {
		return nil, 0, n.errno(err)
	}
	h, err := n.newHandle(ctx, base, flags)
	if err != nil {
		return nil, 0, n.errno(err)
	}
	return h, fuse.FOPEN_DIRECT_IO, 0
}

func (n *Node) Create(ctx context.Context, nm string, flags, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	if n.hidden(nm) {
		return nil, nil, 0, syscall.EPERM
	}
	dir, err := n.dirFd()
	if err != nil {
		return nil, nil, 0, n.errno(err)
	}
	// O_EXCL first, so that a new file gets the caller as owner and an
	// existing one (made outside the mount) is opened as it is.
	fd, err := openAt(dir, nm, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, mode&07777)
	if errors.Is(err, unix.EEXIST) && flags&syscall.O_EXCL == 0 {
		fd, err = openAt(dir, nm, unix.O_RDWR, 0)
	} else if err == nil {
		err = n.own(ctx, dir, nm)
		if err != nil {
			unix.Close(fd)
			_ = unlinkAt(dir, nm, 0)
		}
	}
	if err != nil {
		return nil, nil, 0, n.errno(err)
	}
	st, err := fstat(fd)
	if err != nil {
		unix.Close(fd)
		return nil, nil, 0, n.errno(err)
	}
	in := n.child(ctx, nm, &st, out)
	h, err := in.Operations().(*Node).newHandle(ctx, os.NewFile(uintptr(fd), nm), flags)
	if err != nil {
		return nil, nil, 0, n.errno(err)
	}
	return in, h, fuse.FOPEN_DIRECT_IO, 0
}

// own gives a new entry to the caller (when the daemon is root). In a
// set-gid directory the group stays the directory's, as the kernel does.
func (n *Node) own(ctx context.Context, dir int, nm string) error {
	c, ok := fuse.FromContext(ctx)
	if !ok || os.Geteuid() != 0 {
		return nil
	}
	gid := int(c.Gid)
	if st, err := fstat(dir); err == nil && st.Mode&unix.S_ISGID != 0 {
		gid = -1
	}
	return lchownAt(dir, nm, int(c.Uid), gid)
}
