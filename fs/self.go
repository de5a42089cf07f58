package fs

import (
	"errors"
	"syscall"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
)

// A request about an existing file must act on that file: the backing
// inode the caller's inode stands for. A name can be renamed over
// directly in BACKING at any moment, so no call acts on a name without
// first checking, on an fd, that the name still leads to the file.

// openSelf opens an O_PATH fd of n's current version: through a name
// that still leads to it, else through a descriptor of it held by an open
// handle or the ghost (the file was renamed away directly in BACKING, or
// unlinked while open). ESTALE if nothing leads to it any more: for a
// request by path the kernel then looks the name up again.
func (n *Node) openSelf() (int, error) { return n.openSelfIn(nil) }

// openSelfIn is openSelf for holdDirIn (see findNamedIn).
func (n *Node) openSelfIn(chain []*Node) (int, error) {
	v, err := n.findNamedIn(chain)
	if err == nil {
		fd := v.fd
		v.fd = -1
		v.release()
		return fd, nil
	}
	if fd, ok := n.f.dupVersion(n.r.ids.current(n.f)); ok {
		return fd, nil
	}
	if errors.Is(err, syscall.ENOENT) {
		err = syscall.ESTALE
	}
	return -1, err
}

// withSelf runs fn on an O_PATH fd of n's current version (see openSelf).
func (n *Node) withSelf(fn func(fd int) error) error {
	if n.isDir() {
		return n.withDir(fn)
	}
	fd, err := n.openSelf()
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return fn(fd)
}

// dupVersion returns a duplicate of a descriptor of backing inode k held
// by f: its pin, the version one of its handles opened, or its ghost. Only f.mu is
// taken (a handle's first fd stays open while it is listed), never h.mu,
// which a commit holds while it waits for the lock its caller may hold.
func (f *file) dupVersion(k key) (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fd, ok := dupIfKey(f.pin, k); ok {
		return fd, true
	}
	for h := range f.handles {
		if fd, ok := dupIfKey(int(h.first.Fd()), k); ok {
			return fd, true
		}
	}
	return dupIfKey(f.ghost, k)
}

func dupIfKey(fd int, k key) (int, bool) {
	if fd < 0 {
		return -1, false
	}
	if st, err := backing.Fstat(fd); err != nil || keyOf(&st) != k {
		return -1, false
	}
	d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	return d, err == nil
}

// writeDir returns n's directory fd for a request that creates, removes
// or renames in it, or commits into it, held (holdDir): the caller drops
// it (dropDir). A directory moved out of BACKING directly keeps its fd:
// writing through it would create files outside BACKING, so that is
// ESTALE (the kernel looks the path up again). A walk that could not be
// made (EMFILE: the daemon is out of descriptors) is that error, and
// logged as such: it says nothing of where the directory is.
func (n *Node) writeDir() (int, error) {
	fd, err := n.holdDir()
	if err != nil || n.isRoot() {
		return fd, err
	}
	if err := backing.Inside(fd, n.r.top.key.dev, n.r.top.key.ino); err != nil {
		n.dropDir()
		if !errors.Is(err, backing.ErrLeft) {
			n.r.log.Warn("not written through: cannot check that the directory is inside the backing directory",
				zap.String("path", logPath(n.path())), zap.Error(err))
			return -1, err
		}
		n.r.log.Warn("not written through: "+backing.ErrLeft.Error(), zap.String("path", logPath(n.path())))
		return -1, syscall.ESTALE
	}
	return fd, nil
}
