package fs

import (
	"context"
	"os"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
	"github.com/safefs/safefs/lockmgr"
)

// newEntry runs make in n's directory fd, gives the new entry to the
// caller and returns its inode. size: bytes of its own beyond an inode
// and a block (a symlink's target).
func (n *Node) newEntry(ctx context.Context, nm string, size int, out *fuse.EntryOut, make func(dir int) error) (*gofs.Inode, syscall.Errno) {
	if n.hidden(nm) {
		return nil, syscall.EPERM
	}
	if n.isProbe(nm) {
		return nil, syscall.EACCES
	}
	if !journalable(n.childPath(nm)) {
		return nil, syscall.ENAMETOOLONG
	}
	if err := n.r.roomForMeta(ctx, size); err != nil {
		return nil, n.errno(err)
	}
	dir, err := n.writeDir()
	if err != nil {
		return nil, n.errno(err)
	}
	defer n.dropDir()
	if err := make(dir); err != nil {
		return nil, n.errno(err)
	}
	st, err := n.ownNew(ctx, dir, nm)
	if err != nil {
		n.r.log.Warn("could not give new entry to caller", zap.String("path", n.path()+"/"+nm), zap.Error(err))
		return nil, n.errno(err)
	}
	return n.child(ctx, nm, &st, out), 0
}

// ownNew gives the entry just made at dir/nm to the caller. What it
// finds there must look like what the daemon just made (its own, one
// link), else it was swapped directly in BACKING and is left alone.
func (n *Node) ownNew(ctx context.Context, dir int, nm string) (unix.Stat_t, error) {
	fd, err := backing.OpenAt(dir, nm, unix.O_PATH, 0)
	if err != nil {
		return unix.Stat_t{}, err
	}
	defer unix.Close(fd)
	st, err := backing.Fstat(fd)
	if err != nil {
		return st, err
	}
	links := uint64(1)
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		links = 2 // (1 on btrfs)
	}
	if st.Uid != uint32(os.Geteuid()) || uint64(st.Nlink) > links {
		return st, syscall.ESTALE
	}
	if err := n.own(ctx, dir, fd); err != nil {
		return st, err
	}
	return backing.Fstat(fd)
}

func (n *Node) Mkdir(ctx context.Context, nm string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return n.newEntry(ctx, nm, 0, out, func(dir int) error { return backing.MkdirAt(dir, nm, createMode(dir, mode)) })
}

func (n *Node) Mknod(ctx context.Context, nm string, mode, dev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return n.newEntry(ctx, nm, 0, out, func(dir int) error { return backing.MknodAt(dir, nm, createMode(dir, mode), int(dev)) })
}

func (n *Node) Symlink(ctx context.Context, target, nm string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return n.newEntry(ctx, nm, len(target), out, func(dir int) error { return backing.SymlinkAt(target, dir, nm) })
}

func (n *Node) Link(ctx context.Context, target gofs.InodeEmbedder, nm string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if n.hidden(nm) {
		return nil, syscall.EPERM
	}
	if n.isProbe(nm) {
		return nil, syscall.EACCES
	}
	if !journalable(n.childPath(nm)) {
		return nil, syscall.ENAMETOOLONG
	}
	t := target.(*Node)
	if err := n.r.roomForMeta(ctx, 0); err != nil {
		return nil, n.errno(err)
	}
	dir, err := n.writeDir()
	if err != nil {
		return nil, n.errno(err)
	}
	defer n.dropDir()
	if len(t.f.nameList()) == 0 {
		err = n.linkPrivate(t, dir, nm) // an O_TMPFILE file
	} else {
		// The file itself, by fd: never what its name leads to now.
		err = t.withSelf(func(fd int) error { return backing.LinkFd(fd, dir, nm) })
	}
	if err != nil {
		return nil, n.errno(err)
	}
	st, err := backing.StatAt(dir, nm)
	if err != nil {
		return nil, n.errno(err)
	}
	return n.child(ctx, nm, &st, out), 0
}

// lockChildren takes the commit locks of the named children, so that a
// name never changes under a commit in progress, before a rename or a
// removal, and marks a change of names until release.
func (n *Node) lockChildren(kids ...*Node) (release func(), err error) {
	var keys []lockmgr.Key
	for _, k := range kids {
		if k != nil {
			keys = append(keys, k.lockKey())
		}
	}
	ctx, cancel := lockContext(n.r)
	defer cancel()
	g, err := n.r.locks.Lock(ctx, nil, keys...)
	if err != nil {
		return nil, lockErrno(err)
	}
	done := n.r.changes.Begin()
	// An append record ended lazily, or a redo record not yet
	// checkpointed, names a path this may change: it must be settled
	// first, or recovery could find it open and its path another file
	// (see CommitLazy, redo.go).
	if err := n.r.syncLazy(); err != nil {
		g.Release()
		done()
		return nil, err
	}
	return func() { g.Release(); done() }, nil
}

// kid returns the known child nm of n, or nil.
func (n *Node) kid(nm string) *Node {
	c := n.GetChild(nm)
	if c == nil {
		return nil
	}
	k, _ := c.Operations().(*Node)
	return k
}

func (n *Node) remove(ctx context.Context, nm string, flags int) syscall.Errno {
	if n.hidden(nm) {
		return syscall.ENOENT
	}
	if n.probeHidden(ctx, nm) {
		return syscall.EACCES
	}
	k := n.kid(nm)
	release, err := n.lockChildren(k)
	if err != nil {
		return n.errno(err)
	}
	defer release()
	dir, drop, err := n.holdEntryDir(nm, true)
	if err != nil {
		return n.errno(err)
	}
	defer drop()
	ghost := k.pathFd(dir, nm)
	if err := backing.UnlinkAt(dir, nm, flags); err != nil {
		closeFd(ghost)
		return n.errno(err)
	}
	if k != nil {
		k.f.dropName(n, nm)
		k.f.lostName(ghost)
	}
	return 0
}

// pathFd opens an O_PATH fd of k's version at dir/nm before a change
// that may take k's last name: see file.ghost. -1 if k is not a known
// regular file or symlink there.
func (k *Node) pathFd(dir int, nm string) int {
	if k == nil || (k.f.kind != unix.S_IFREG && k.f.kind != unix.S_IFLNK) {
		return -1
	}
	fd, err := backing.OpenAt(dir, nm, unix.O_PATH, 0)
	if err != nil {
		return -1
	}
	if st, err := backing.Fstat(fd); err != nil || !k.r.ids.owns(k.f, keyOf(&st)) {
		unix.Close(fd)
		return -1
	}
	return fd
}

func closeFd(fd int) {
	if fd >= 0 {
		unix.Close(fd)
	}
}

func (n *Node) Unlink(ctx context.Context, nm string) syscall.Errno { return n.remove(ctx, nm, 0) }

func (n *Node) Rmdir(ctx context.Context, nm string) syscall.Errno {
	return n.remove(ctx, nm, unix.AT_REMOVEDIR)
}

func (n *Node) Rename(ctx context.Context, nm string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np := newParent.(*Node)
	if n.hidden(nm) || np.hidden(newName) {
		return syscall.EPERM
	}
	if n.isProbe(nm) || np.isProbe(newName) {
		return syscall.EACCES
	}
	if !journalable(np.childPath(newName)) {
		return syscall.ENAMETOOLONG
	}
	if err := n.r.roomForMeta(ctx, 0); err != nil {
		return n.errno(err)
	}
	src, dst := n.kid(nm), np.kid(newName)
	release, err := n.lockChildren(src, dst)
	if err != nil {
		return n.errno(err)
	}
	defer release()
	odir, err := n.writeDir()
	if err != nil {
		return n.errno(err)
	}
	defer n.dropDir()
	ndir, err := np.writeDir()
	if err != nil {
		return n.errno(err)
	}
	defer np.dropDir()
	ghost := -1
	if dst != src && flags&unix.RENAME_EXCHANGE == 0 {
		ghost = dst.pathFd(ndir, newName)
	}
	if err := backing.RenameAt(odir, nm, ndir, newName, uint(flags)); err != nil {
		closeFd(ghost)
		return n.errno(err)
	}
	unlock := n.rmwNamesLock()
	if src != nil {
		src.f.dropName(n, nm)
		src.f.addName(np, newName)
	}
	if dst != nil && dst != src {
		dst.f.dropName(np, newName)
		if flags&unix.RENAME_EXCHANGE != 0 {
			dst.f.addName(n, nm)
		}
		dst.f.lostName(ghost)
	}
	after := func() {}
	if flags&unix.RENAME_EXCHANGE == 0 {
		after = n.rmwRenamed(ctx, src, dst, np.childPath(newName)) // a rename over a file may be its write
	}
	unlock()
	after()
	return 0
}

func (n *Node) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	dir, err := n.holdDir()
	if err != nil {
		return nil, n.errno(err)
	}
	fd, err := unix.Openat(dir, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	n.dropDir()
	if err != nil {
		return nil, n.errno(err)
	}
	st, err := backing.Fstat(fd)
	if err != nil {
		unix.Close(fd)
		return nil, n.errno(err)
	}
	ds, errno := gofs.NewLoopbackDirStreamFd(fd)
	if errno != 0 {
		unix.Close(fd)
		return nil, errno
	}
	defer ds.Close()
	var list []fuse.DirEntry
	for ds.HasNext() {
		e, errno := ds.Next()
		if errno != 0 {
			return nil, errno
		}
		if n.hidden(e.Name) {
			continue
		}
		e.Ino = n.r.ids.inoOf(key{uint64(st.Dev), e.Ino})
		list = append(list, e)
	}
	return gofs.NewListDirStream(list), 0
}
