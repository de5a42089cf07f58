package fs

import (
	"context"
	"strings"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/acl"
	"github.com/safefs/safefs/internal/backing"
	"github.com/safefs/safefs/internal/xattr"
)

func (n *Node) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	h, _ := fh.(*handle)
	if size, ok := in.GetSize(); ok {
		if err := n.truncate(ctx, h, size); err != nil {
			return n.errno(err)
		}
	}
	if hasMeta(in) {
		err := n.locked(func() error {
			return n.withSelf(func(fd int) error { return setMeta(backing.ProcPath(fd), in) })
		})
		if err != nil {
			return n.errno(err)
		}
		if in.Valid&(fuse.FATTR_MODE|fuse.FATTR_UID|fuse.FATTR_GID) != 0 {
			n.permChanged()
		}
		// futimens comes without a file handle: pending versions take
		// the times too, so that they survive the commit (cp -p, tar).
		for _, h := range n.f.handleList() {
			if err := h.setMeta(in); err != nil {
				return n.errno(err)
			}
		}
	}
	// The kernel stores a SETATTR reply's size whatever its version:
	// never below a map's extent (attrcache.go).
	errno, _ := n.getattr(ctx, fh, out)
	out.Size = max(out.Size, uint64(n.f.mappedSize()))
	return errno
}

// hasMeta reports whether in changes anything besides the size.
func hasMeta(in *fuse.SetAttrIn) bool {
	return in.Valid&^(fuse.FATTR_SIZE|fuse.FATTR_FH|fuse.FATTR_LOCKOWNER) != 0
}

// setMeta applies chown, chmod and utimens of in to the inode at path
// (a /proc/self/fd path of an O_PATH fd: exactly that inode).
func setMeta(path string, in *fuse.SetAttrIn) error {
	uid, uok := in.GetUID()
	gid, gok := in.GetGID()
	if uok || gok {
		u, g := -1, -1
		if uok {
			u = int(uid)
		}
		if gok {
			g = int(gid)
		}
		if err := unix.Chown(path, u, g); err != nil {
			return err
		}
	}
	if mode, ok := in.GetMode(); ok {
		if err := unix.Chmod(path, mode&07777); err != nil {
			return err
		}
	}
	return setTimes(path, in)
}

func setTimes(path string, in *fuse.SetAttrIn) error {
	ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
	set := false
	if a, ok := in.GetATime(); ok {
		ts[0], set = unix.NsecToTimespec(a.UnixNano()), true
	} else if in.Valid&fuse.FATTR_ATIME_NOW != 0 {
		ts[0], set = unix.Timespec{Nsec: unix.UTIME_NOW}, true
	}
	if m, ok := in.GetMTime(); ok {
		ts[1], set = unix.NsecToTimespec(m.UnixNano()), true
	} else if in.Valid&fuse.FATTR_MTIME_NOW != 0 {
		ts[1], set = unix.Timespec{Nsec: unix.UTIME_NOW}, true
	}
	if !set {
		return nil
	}
	return unix.UtimesNanoAt(unix.AT_FDCWD, path, ts, 0)
}

// setMeta applies mode and times to the pending version too, so that
// futimens or fchmod before close survive the commit.
func (h *handle) setMeta(in *fuse.SetAttrIn) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	// A new file written in place at commit would get the commit's times.
	if err := h.spillNew(); err != nil {
		return err
	}
	if h.p.stage == nil || h.p.appends() {
		return nil
	}
	return setTimes(backing.ProcPath(int(h.p.stage.Fd())), in)
}

// truncate is ftruncate on a write handle (pending until close), or
// truncate(path): a commit of its own.
func (n *Node) truncate(ctx context.Context, h *handle, size uint64) error {
	if h != nil && h.write {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.truncate(size)
	}
	if n.r.opts.ReadOnly {
		return syscall.EROFS
	}
	if n.f.isRaw() {
		return n.rawTruncatePath(size)
	}
	if err := n.r.takeFile(ctx); err != nil {
		return err
	}
	ver := n.f.ver()
	base, err := n.openCurrent(unix.O_RDWR)
	if err == nil {
		var t *handle
		if t, err = n.newHandle(ctx, base, ver, syscall.O_WRONLY, false); err == nil {
			defer t.Release(ctx)
			return t.truncateCommit(size)
		}
	}
	n.r.files.Give(callerUID(ctx))
	return err
}

// truncateCommit is truncate(path) on a handle of its own.
func (t *handle) truncateCommit(size uint64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.truncate(size); err != nil {
		return err
	}
	return t.commit()
}

func (n *Node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	var sz int
	err := n.withSelf(func(fd int) (err error) {
		sz, err = unix.Getxattr(backing.ProcPath(fd), attr, dest)
		return err
	})
	return uint32(max(sz, 0)), n.errno(err)
}

// Listxattr lists what the caller could list on BACKING itself: the
// trusted.* names only to a caller with CAP_SYS_ADMIN, as ext4 does (the
// daemon, as root, sees them all).
func (n *Node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	var names []string
	err := n.withSelf(func(fd int) (err error) {
		names, err = xattr.List(backing.ProcPath(fd))
		return err
	})
	if err != nil {
		return 0, n.errno(err)
	}
	admin := callerHasCap(ctx, capSysAdmin)
	var list []byte
	for _, a := range names {
		if admin || !strings.HasPrefix(a, "trusted.") {
			list = append(append(list, a...), 0)
		}
	}
	if len(dest) == 0 {
		return uint32(len(list)), 0
	}
	if len(list) > len(dest) {
		return 0, syscall.ERANGE
	}
	return uint32(copy(dest, list)), 0
}

func (n *Node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	if err := n.r.roomForMeta(ctx, len(attr)+len(data)); err != nil {
		return n.errno(err)
	}
	err := n.locked(func() error {
		return n.withSelf(func(fd int) error {
			return unix.Setxattr(backing.ProcPath(fd), attr, data, int(flags))
		})
	})
	n.xattrChanged(attr, err)
	return n.errno(err)
}

func (n *Node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	err := n.locked(func() error {
		return n.withSelf(func(fd int) error {
			return unix.Removexattr(backing.ProcPath(fd), attr)
		})
	})
	n.xattrChanged(attr, err)
	return n.errno(err)
}

// xattrChanged follows a set or removal of xattr attr (err: its
// result): an access ACL, which may also have changed the mode, is a
// change of permissions.
func (n *Node) xattrChanged(attr string, err error) {
	if err == nil && attr == acl.AccessXattr {
		n.permChanged()
	}
}

// locked runs fn under n's commit lock, so that a change of metadata
// lands on the version in place, not on one a commit is replacing.
func (n *Node) locked(fn func() error) error {
	release, err := n.lockChildren(n)
	if err != nil {
		return err
	}
	defer release()
	return fn()
}
