package fs

import (
	"context"
	"errors"
	"sync/atomic"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
	"github.com/safefs/safefs/internal/dirfds"
	"github.com/safefs/safefs/internal/epoch"
	"github.com/safefs/safefs/journal"
)

// Node is the FUSE side of one logical file or directory. Several Nodes
// may exist for one logical file while go-fuse picks the one it keeps;
// all state lives in the shared *file.
type Node struct {
	gofs.Inode
	r *root
	f *file

	// dir: a directory's O_PATH fd and its place among the idle fds
	// (dirfds.go).
	dir dirfds.Entry

	rl nodeRoles // its role (roles.go), under f.mu

	forgot atomic.Bool // OnForget ran: once, from go-fuse or candidates.settle
}

func (r *root) newNode(f *file) *Node { return &Node{r: r, f: f, dir: dirfds.NewEntry()} }

func (n *Node) isRoot() bool { return n.f == n.r.top }

func (n *Node) isDir() bool { return n.f.kind == unix.S_IFDIR }

// path is the path below the mount root, for logs and the journal. It
// is built from the file's own names, not from n's place in go-fuse's
// tree: n may be a duplicate that go-fuse did not keep.
func (n *Node) path() string {
	if n.isRoot() {
		return "."
	}
	nm, ok := n.f.anyName()
	if !ok {
		return "(unlinked)"
	}
	return nm.rel()
}

// childPath is the path below the mount root of entry nm of n.
func (n *Node) childPath(nm string) string {
	if n.isRoot() {
		return nm
	}
	return n.path() + "/" + nm
}

// journalable reports whether a file at path p can be committed: the
// journal records its path (ENAMETOOLONG beyond, better at open or
// create than at close, where the bytes would be lost).
func journalable(p string) bool { return len(p) <= journal.MaxTarget }

// rel is the name's path below the mount root.
func (o name) rel() string {
	if o.dir.isRoot() {
		return o.name
	}
	return o.dir.Path(o.dir.r.topNode) + "/" + o.name
}

func (n *Node) errno(err error) syscall.Errno {
	return toErrno(n.r.log, n.path(), err)
}

// OnForget drops the directory fd and, once nothing refers to the logical
// file any more, its table entries.
func (n *Node) OnForget() {
	if n.forgot.Swap(true) {
		return
	}
	n.r.dirs.Forget(&n.dir)
	if n.forgettable() {
		n.r.forget(n.f)
	}
}

// stat returns the attributes of f's current committed version.
func (n *Node) stat() (unix.Stat_t, error) {
	if n.isDir() {
		var st unix.Stat_t
		err := n.withDir(func(fd int) (err error) {
			st, err = backing.Fstat(fd)
			return err
		})
		return st, err
	}
	n.f.inPlace.RLock()
	st, err := n.statNamed()
	n.f.inPlace.RUnlock()
	if err != nil {
		if st, ok := n.f.statOpen(); ok {
			return st, nil // unlinked but still open
		}
		if st, gerr := n.f.statGhost(); gerr == nil {
			return st, nil
		}
		if errors.Is(err, syscall.ENOENT) {
			// Renamed over or removed after the kernel resolved the
			// name: ESTALE makes the kernel look it up again.
			err = syscall.ESTALE
		}
		return unix.Stat_t{}, err
	}
	return st, nil
}

// statNamed stats f's committed version through a name that still leads
// to it (a name racing a rename may already lead to the next file). No
// fd is needed: the attributes returned are those of the inode checked.
func (n *Node) statNamed() (unix.Stat_t, error) {
	for range staleTries { // see findNamed
		v, ok := n.statName(func(o name, st *unix.Stat_t) bool {
			return n.r.ids.owns(n.f, keyOf(st)) || n.adoptPublished(o.rel(), st)
		})
		if ok {
			return v.st, nil
		}
	}
	return unix.Stat_t{}, syscall.ENOENT
}

// statName returns the first name of f whose backing stat leads accepts,
// looked at by a stat of the name, without an fd (v.fd and v.dir are -1).
func (n *Node) statName(leads func(name, *unix.Stat_t) bool) (named, bool) {
	for _, o := range n.f.nameList() {
		var st unix.Stat_t
		err := o.withDir(func(dir int) (err error) {
			st, err = backing.StatAt(dir, o.name)
			return err
		})
		if err == nil && leads(o, &st) {
			return named{fd: -1, in: o.dir, dir: -1, nm: o.name, st: st}, true
		}
	}
	return noName, false
}

// named is a name of a logical file checked to lead to its version.
type named struct {
	fd  int   // O_PATH fd of the version, or -1
	in  *Node // the name's directory
	dir int   // its fd, held (holdDir), or -1
	nm  string
	st  unix.Stat_t
}

// noName is the named of a failure: nothing to release.
var noName = named{fd: -1, dir: -1}

// release closes v.fd and lets v.dir go; the holder of a named calls it.
func (v named) release() {
	closeFd(v.fd)
	if v.dir >= 0 {
		v.in.dropDir()
	}
}

// findNamed finds a name of f that leads to its committed version (or
// the one a commit in progress is putting in place) and opens it O_PATH:
// what the fd names cannot change any more, whatever happens to the name.
// A name racing a commit's rename may lead to the next version already,
// which is worth a few more tries (see openCurrent). ENOENT: no name
// leads to it; another error: a name could not be looked at. The name's
// directory fd is held: the caller releases v (v.release).
func (n *Node) findNamed() (named, error) { return n.findNamedIn(nil) }

// findNamedIn is findNamed for holdDirIn: chain are the directories
// being opened again, the innermost last.
func (n *Node) findNamedIn(chain []*Node) (named, error) {
	err := error(syscall.ENOENT)
	for range staleTries {
		for _, o := range n.f.nameList() {
			v, ok, oerr := n.tryName(o, chain)
			if ok {
				return v, nil
			}
			if oerr != nil && !errors.Is(oerr, syscall.ENOENT) {
				err = oerr
			}
		}
		if !errors.Is(err, syscall.ENOENT) {
			return noName, err // not a race: no use trying again
		}
	}
	return noName, err
}

func (n *Node) tryName(o name, chain []*Node) (named, bool, error) {
	dir, err := o.dir.holdDirIn(chain)
	if err != nil {
		return noName, false, err
	}
	fd, err := backing.OpenAt(dir, o.name, unix.O_PATH, 0)
	if err != nil {
		o.dir.dropDir()
		return noName, false, err
	}
	st, err := backing.Fstat(fd)
	if err == nil && n.r.ids.owns(n.f, keyOf(&st)) {
		return named{fd: fd, in: o.dir, dir: dir, nm: o.name, st: st}, true, nil
	}
	unix.Close(fd)
	o.dir.dropDir()
	return noName, false, err
}

func fillAttr(a *fuse.Attr, st *unix.Stat_t, ino uint64) {
	a.Ino = ino
	a.Size = uint64(st.Size)
	a.Blocks = uint64(st.Blocks)
	a.Atime, a.Atimensec = uint64(st.Atim.Sec), uint32(st.Atim.Nsec)
	a.Mtime, a.Mtimensec = uint64(st.Mtim.Sec), uint32(st.Mtim.Nsec)
	a.Ctime, a.Ctimensec = uint64(st.Ctim.Sec), uint32(st.Ctim.Nsec)
	a.Mode = st.Mode
	a.Nlink = uint32(st.Nlink)
	a.Owner = fuse.Owner{Uid: st.Uid, Gid: st.Gid}
	a.Rdev = uint32(st.Rdev)
	a.Blksize = uint32(st.Blksize)
}

// child returns the inode for entry nm of n, whose backing stat is st.
func (n *Node) child(ctx context.Context, nm string, st *unix.Stat_t, out *fuse.EntryOut) *gofs.Inode {
	f := n.entryFile(nm, st)
	f.addName(n, nm)
	return n.nodeFor(ctx, f, st, out)
}

// entryFile is the logical file of entry nm, whose backing stat is st.
func (n *Node) entryFile(nm string, st *unix.Stat_t) *file {
	f, made := n.r.ids.get(st)
	if !made && !f.named(n, nm, keyOf(st)) {
		// The backing inode number was freed and reused (the file was
		// deleted directly in BACKING): this is another file.
		f = n.r.ids.fresh(st)
	}
	return f
}

func (n *Node) nodeFor(ctx context.Context, f *file, st *unix.Stat_t, out *fuse.EntryOut) *gofs.Inode {
	fillAttr(&out.Attr, st, f.ino)
	nn := n.r.newNode(f)
	id := f.identityNow(callerTid(ctx))
	// NewInode always returns nn's own inode (go-fuse picks between
	// nodes of one identity only after the lookup returns: candidates).
	in := n.NewInode(ctx, nn, id)
	n.r.made(ctx, nn, id.Gen)
	return in
}

// lookupFile stats dir/nm and names its logical file nm. The kernel
// sends a lookup to revalidate a cached name without holding the
// directory's lock, so a rename through the mount may take nm from that
// file between the stat and the naming: a file that had not the name
// yet gets it only if nm still leads to it after, else the lookup starts
// over (a file left with a name it lost failed its writer's commit with
// ESTALE; renamed over, it has nowhere to go, as on a local file system).
// Nothing needs checking again when no change of names ran meanwhile
// (e, taken before the stat): one stat per lookup, as on a plain mount.
func (n *Node) lookupFile(dir int, nm string, e epoch.Epoch) (st unix.Stat_t, f *file, err error) {
	for range staleTries {
		if st, err = n.statEntry(dir, nm, e); err != nil {
			return st, nil, err
		}
		n.r.crash("lookup-stated") // a stop point for tests only
		f = n.entryFile(nm, &st)
		if !f.addName(n, nm) || n.unchanged(e) || n.leadsTo(dir, nm, f) {
			return st, f, nil
		}
		f.dropName(n, nm)
	}
	return st, f, nil
}

// unchanged reports whether no change of names through the mount began
// since e. Another daemon of a cluster changes names unseen.
func (n *Node) unchanged(e epoch.Epoch) bool {
	return !n.r.clustered() && n.r.changes.Stable(e)
}

// leadsTo reports whether dir/nm leads to f's version.
func (n *Node) leadsTo(dir int, nm string, f *file) bool {
	st, err := backing.StatAt(dir, nm)
	return err == nil && n.r.ids.owns(f, keyOf(&st))
}

// hidden reports whether nm in n is the internal directory.
func (n *Node) hidden(nm string) bool {
	return n.isRoot() && nm == InternalDir
}

func (n *Node) Lookup(ctx context.Context, nm string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if n.hidden(nm) {
		return nil, syscall.ENOENT
	}
	if n.probeHidden(ctx, nm) {
		return nil, syscall.EACCES
	}
	dir, drop, err := n.holdEntryDir(nm, false)
	if err != nil {
		return nil, n.errno(err)
	}
	defer drop()
	e := n.r.changes.Now()
	st, f, err := n.lookupFile(dir, nm, e)
	if err != nil {
		return nil, n.errno(err)
	}
	in := n.nodeFor(ctx, f, &st, out)
	stable := n.r.changes.Stable(e)
	versionEntry(in, out, stable)
	f.keepSize(out.Size)
	if stable {
		out.SetAttrTimeout(n.r.attrTimeout(f, f.ver()))
	}
	return in, 0
}

// statEntry stats dir/nm for a lookup. An inode no logical file has yet
// may be the old version a commit has just renamed over (stat'ed before
// the rename, looked up after): only if the name still leads to it is it
// a new file. When no change of names began since e, it is.
func (n *Node) statEntry(dir int, nm string, e epoch.Epoch) (st unix.Stat_t, err error) {
	for range staleTries {
		st, err = backing.StatAt(dir, nm)
		n.r.crash("lookup-stat") // a stop point for tests only
		if err != nil || n.r.ids.known(keyOf(&st)) || n.unchanged(e) {
			return st, err
		}
		again, err := backing.StatAt(dir, nm)
		if err != nil || keyOf(&again) == keyOf(&st) {
			return st, err
		}
	}
	return st, err
}

// Getattr describes what the handle reads when the kernel named one.
// Without one (stat, fstat) it describes what the calling process most
// likely reads (see callerHandle), else the committed version; the
// kernel keeps its own size if that differs (keepSize).
func (n *Node) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	errno, own := n.getattr(ctx, fh, out)
	if errno == 0 && !hasFh(ctx) && !own {
		n.f.keepSize(out.Size)
	}
	return errno
}

// getattr fills out; own: it describes n's version (versionAttr), not
// its caller's.
func (n *Node) getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) (errno syscall.Errno, own bool) {
	ver := n.f.ver()
	h, ok := fh.(*handle)
	vh, own := n.versionAttr()
	if own {
		h = vh // a version's node: its size and pages are that version's
	} else if !ok || !hasFh(ctx) {
		h = n.callerHandle(ctx)
	}
	st, err := unix.Stat_t{}, error(syscall.EBADF)
	if h != nil {
		st, err = h.stat()
	}
	if err != nil {
		st, err = n.stat()
	}
	if err != nil {
		return n.errno(err), own
	}
	fillAttr(&out.Attr, &st, n.f.ino)
	out.SetTimeout(n.r.attrTimeout(n.f, ver))
	return 0, own
}

func (n *Node) callerHandle(ctx context.Context) *handle {
	tid := callerTid(ctx)
	if tid == 0 || n.isDir() || !n.f.hasHandles() {
		return nil
	}
	tgid := n.f.tgidOf(tid)
	if h := n.nodeHandle(tid, tgid); h != nil {
		return h
	}
	return n.f.callerHandle(tid, tgid)
}

// Fsync on a directory (fsync of a file goes to its handle).
func (n *Node) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	if h, ok := fh.(*handle); ok {
		return h.Fsync(ctx, flags)
	}
	if !n.isDir() {
		return syscall.EBADF
	}
	return n.errno(n.withDir(backing.FsyncDir))
}

func (n *Node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	var s unix.Statfs_t
	if err := unix.Fstatfs(n.r.rootfd, &s); err != nil {
		return n.errno(err)
	}
	out.Blocks, out.Bfree, out.Bavail = s.Blocks, s.Bfree, s.Bavail
	out.Files, out.Ffree = s.Files, s.Ffree
	out.Bsize, out.Frsize = uint32(s.Bsize), uint32(s.Frsize)
	out.NameLen = uint32(s.Namelen)
	return 0
}

func (n *Node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	var s string
	err := n.withSelf(func(fd int) (err error) {
		s, err = backing.ReadlinkFd(fd)
		return err
	})
	if err != nil {
		return nil, n.errno(err)
	}
	return []byte(s), 0
}
