package fs

import (
	"context"
	"errors"
	"os"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
	"github.com/safefs/safefs/internal/proc"
)

// openCurrent opens the current committed version of a regular file,
// through a name that still leads to it. ENOENT: no name is left.
// ESTALE: the names lead to other files now (replaced directly in
// BACKING); the kernel then looks the name up again and retries.
func (n *Node) openCurrent(flags int) (f *os.File, err error) {
	// A commit of this file between the open and the check moves the
	// file to a new inode: that is worth a few more tries.
	for range staleTries {
		if f, err = n.openNamed(flags); !errors.Is(err, syscall.ESTALE) {
			break
		}
	}
	return f, err
}

const staleTries = 3

func (n *Node) openNamed(flags int) (*os.File, error) {
	names := n.f.nameList()
	if len(names) == 0 {
		return nil, syscall.ENOENT
	}
	err := error(syscall.ESTALE)
	for _, o := range names {
		dir, drop, derr := o.holdDir()
		if derr != nil {
			continue
		}
		fd, st, oerr := backing.OpenRegularStat(dir, o.name, flags)
		drop()
		if oerr != nil {
			if !errors.Is(oerr, syscall.ENOENT) {
				err = oerr
			}
			continue
		}
		if n.r.ids.owns(n.f, keyOf(&st)) || n.adoptPublished(o.rel(), &st) {
			return fd, nil
		}
		fd.Close()
	}
	return nil, err
}

func isWrite(flags uint32) bool {
	return flags&syscall.O_ACCMODE != syscall.O_RDONLY
}

// newHandle makes a handle on base, the file's current version. The
// caller has taken a file slot (takeFile): the handle gives it back. Writers get
// direct I/O so that their pending bytes never enter the page cache
// shared by every handle of the kernel inode; readers too, so an old
// reader never sees pages of a newer version.
// ver is the file's version read before base was opened: if a commit
// came in between, the handle looks newer versions up rather than take
// an older one for the latest. made: the caller's create made base.
func (n *Node) newHandle(ctx context.Context, base *os.File, ver uint64, flags uint32, made bool) (*handle, error) {
	h := n.handleOn(ctx, base, ver, flags)
	h.p.made = made && h.write && !h.p.appends() && !n.r.clustered()
	if h.p.made && flags&syscall.O_TRUNC != 0 {
		// A new file's content starts empty and is kept in memory
		// (appendbuf.go): no staging file at open.
		h.p.newFile = true
		h.changed()
		h.p.state = truncOnly
		h.noteSize()
	} else if h.write && flags&syscall.O_TRUNC != 0 {
		if err := h.truncate(0); err != nil {
			base.Close()
			return nil, err
		}
		h.p.state = truncOnly
	}
	// Until it writes, a writer shows the committed version (quiet).
	h.settle()
	n.f.addHandle(h)
	n.r.openWriters.add(h)
	return h, nil
}

// handleOn is a new handle on base for the caller, not registered yet.
func (n *Node) handleOn(ctx context.Context, base *os.File, ver uint64, flags uint32) *handle {
	h := &handle{n: n, write: isWrite(flags), first: base, base: base, baseVer: ver}
	if flags&syscall.O_APPEND != 0 {
		h.p.mode = appending
	}
	if c, ok := fuse.FromContext(ctx); ok {
		h.uid, h.gid, h.tid, h.tgid = c.Uid, c.Gid, c.Pid, proc.Tgid(c.Pid)
	}
	return h
}

// sharedHandle is a read-only handle on s, its node's version
// descriptor, which it holds until release.
func (n *Node) sharedHandle(ctx context.Context, s *sharedFile, ver uint64, flags uint32) *handle {
	h := n.handleOn(ctx, s.f, ver, flags)
	h.shared = s
	n.f.addHandle(h)
	return h
}

func (n *Node) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if isWrite(flags) && n.r.opts.ReadOnly {
		return nil, 0, syscall.EROFS
	}
	if isWrite(flags) && !journalable(n.path()) {
		return nil, 0, syscall.ENAMETOOLONG
	}
	tid := callerTid(ctx)
	retry := n.r.refused.Take(tid)
	if n.rawNow(flags) {
		return n.openRaw(ctx, flags, tid, retry) // rawfile.go
	}
	// A session is waited for before the version is chosen, so the
	// opener reads what the previous holder committed; a rename over
	// the file meanwhile sends it to the new file (rmw.go).
	sess := n.rmwEnter(ctx, flags)
	if !retry && n.rmwReplaced(sess) {
		n.r.refused.Note(tid)
		return nil, 0, syscall.ESTALE // the kernel looks the name up again
	}
	if isWrite(flags) && !n.writerMayOpen(tid, retry) || !isWrite(flags) && !n.readerMayOpen(tid, retry) {
		sess.Close() // the retry joins it
		n.r.refused.Note(tid)
		n.r.crash("open-refused")     // a stop point for tests only
		return nil, 0, syscall.ESTALE // the kernel looks the name up again
	}
	defer n.openDone(tid)
	if err := n.r.takeFile(ctx); err != nil {
		sess.Close()
		return nil, 0, n.errno(err)
	}
	h, st, err := n.open(ctx, flags) // st: the version opened, if known
	for w := (backing.LeaseWaiter{}); errors.Is(err, backing.ErrLeased) && w.Again(ctx); {
		// Another process's lease is in the way (lease.go): waited for
		// here, where no lock is held (a read-modify-write session is
		// the caller's own, and outlives a failed open anyway).
		h, st, err = n.open(ctx, flags)
	}
	mixes := false
	if err == nil {
		st, mixes = n.readerMixes(h, st, retry)
	}
	if mixes {
		n.rmwOpened(nil, sess, flags)
		h.mu.Lock()
		h.close() // gives its file slot back
		h.mu.Unlock()
		n.r.refused.Note(tid)
		return nil, 0, syscall.ESTALE
	}
	n.rmwOpened(h, sess, flags)
	if err != nil {
		n.r.files.Give(callerUID(ctx))
		if errors.Is(err, syscall.ESTALE) {
			n.r.refused.Note(tid)
		}
		n.r.leaseRefused(ctx, "open", n.path(), n.r.ids.current(n.f), err)
		return nil, 0, n.errno(err)
	}
	if n.f.isRaw() {
		// It became raw while this open was on its way (rawfile.go).
		h.mu.Lock()
		h.switchRaw()
		h.mu.Unlock()
	}
	if n.ptWriter(ctx, h, flags) {
		return h, 0, 0
	}
	return h, n.openReply(ctx, h, st), 0
}

// openReply is the OPEN reply's flags: passthrough, the page cache of a
// version's node, or direct I/O. st: h's version if known (else nil).
func (n *Node) openReply(ctx context.Context, h *handle, st *unix.Stat_t) uint32 {
	if n.r.opts.VersionCache {
		return n.openFlags(ctx, h, st)
	}
	return n.ptOpen(ctx, h)
}

func (n *Node) open(ctx context.Context, flags uint32) (*handle, *unix.Stat_t, error) {
	mode := unix.O_RDONLY
	if isWrite(flags) {
		mode = unix.O_RDWR
	} else if s, st, ver, ok := n.readerVersion(); ok {
		return n.sharedHandle(ctx, s, ver, flags), st, nil
	}
	ver := n.f.ver()
	base, err := n.openCurrent(mode)
	if errors.Is(err, syscall.ENOENT) {
		base, err = n.f.openGhost(mode)
	}
	if errors.Is(err, syscall.ENOENT) {
		// The name was replaced or removed after the kernel resolved it:
		// ESTALE makes the kernel look it up again.
		err = syscall.ESTALE
	}
	if err != nil {
		return nil, nil, err
	}
	h, err := n.newHandle(ctx, base, ver, flags, false)
	return h, nil, err
}

func (n *Node) Create(ctx context.Context, nm string, flags, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	if n.hidden(nm) {
		return nil, nil, 0, syscall.EPERM
	}
	if n.probeHidden(ctx, nm) {
		return nil, nil, 0, syscall.EACCES
	}
	if !journalable(n.childPath(nm)) {
		return nil, nil, 0, syscall.ENAMETOOLONG
	}
	dir, drop, err := n.holdEntryDir(nm, true)
	if err != nil {
		return nil, nil, 0, n.errno(err)
	}
	defer drop()
	tid := callerTid(ctx)
	retry := n.r.refused.Take(tid) // a refused open's retry may come as a create
	if err := n.r.roomForMeta(ctx, 0); err != nil {
		return nil, nil, 0, n.errno(err)
	}
	if err := n.r.takeFile(ctx); err != nil {
		return nil, nil, 0, n.errno(err)
	}
	in, h, err := n.create(ctx, dir, nm, flags, mode, out)
	if err != nil {
		n.r.files.Give(callerUID(ctx))
		if errors.Is(err, backing.ErrLeased) && !retry {
			// An existing file another process holds a lease on. The
			// kernel holds the directory's lock around CREATE: ESTALE
			// makes it look the name up again, find the file, and send
			// an OPEN without that lock, which waits for the lease.
			n.r.refused.Note(tid)
			return nil, nil, 0, syscall.ESTALE
		}
		if errors.Is(err, backing.ErrLeased) {
			st, _ := backing.StatAt(dir, nm)
			n.r.leaseRefused(ctx, "create", n.childPath(nm), keyOf(&st), err)
		}
		return nil, nil, 0, n.errno(err)
	}
	// A handle with nothing pending is settled at open (newHandle): the
	// kernel's permission check of the new file (may_open) and the
	// opener's fstat need not ask again.
	out.SetAttrTimeout(n.r.attrTimeout(h.n.f, h.baseVer))
	if h.raw {
		return in, h, h.n.rawReply(ctx, h), 0
	}
	if h.write && n.r.opts.VersionCache {
		h.n.markDirect(callerTid(ctx)) // a writer's node: direct
	}
	if h.n.ptWriter(ctx, h, flags) {
		return in, h, 0, 0
	}
	return in, h, h.n.openReply(ctx, h, nil), 0
}

func (n *Node) create(ctx context.Context, dir int, nm string, flags, mode uint32, out *fuse.EntryOut) (*gofs.Inode, *handle, error) {
	// O_EXCL first, so that a new file gets the caller as owner and an
	// existing one (made outside the mount) is opened as it is.
	f, created, err := n.createOrOpen(ctx, dir, nm, flags, mode)
	if err != nil {
		return nil, nil, err
	}
	st, err := backing.Fstat(int(f.Fd()))
	if err == nil && !created {
		err = mayOpen(ctx, int(f.Fd()), &st, flags)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	in := n.child(ctx, nm, &st, out)
	cn := in.Operations().(*Node)
	if cn.f.kind == unix.S_IFREG && (cn.f.isRaw() || rawName(dir, nm) || !created && cn.rawNow(flags)) {
		// A database's sibling, or a raw file opened with O_CREAT.
		cn.makeRaw("name", true)
		h, err := cn.rawHandle(ctx, f, flags, created)
		return in, h, err
	}
	// A file that was there already may have had a commit since we
	// opened it: staleVer makes a writer look the latest version up.
	ver := uint64(staleVer)
	if created {
		ver = cn.f.ver()
	}
	h, err := cn.newHandle(ctx, f, ver, flags, created)
	if err != nil {
		if created {
			n.unlinkNew(dir, nm) // as if the open had failed first
		}
		return nil, nil, err
	}
	// No session wait here: the kernel holds the directory's lock
	// around CREATE. Learning still sees the write.
	cn.rmwOpened(h, nil, flags)
	return in, h, nil
}

// unlinkNew removes the file a failed create made, a change of names
// for lookups that may have found it.
func (n *Node) unlinkNew(dir int, nm string) {
	defer n.r.changes.Begin()()
	_ = backing.UnlinkAt(dir, nm, 0)
}

// staleVer is a version no file reaches: a handle holding it refreshes.
const staleVer = ^uint64(0)

// createOrOpen creates nm for the caller, or without O_EXCL opens the
// regular file some other process put there first.
func (n *Node) createOrOpen(ctx context.Context, dir int, nm string, flags, mode uint32) (*os.File, bool, error) {
	// Made without set-id bits, which the chown to the caller would
	// clear, and which a root-owned file must never have meanwhile; they
	// are set once the file is the caller's (the kernel has already
	// taken off a set-gid the caller may not have).
	want := createMode(dir, mode) & 07777
	fd, err := backing.OpenAt(dir, nm, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, want&^(unix.S_ISUID|unix.S_ISGID))
	if errors.Is(err, unix.EEXIST) && flags&syscall.O_EXCL == 0 {
		f, err := backing.OpenRegular(dir, nm, unix.O_RDWR)
		return f, false, err
	}
	if err != nil {
		return nil, false, err
	}
	err = n.own(ctx, dir, fd)
	if err == nil && want&(unix.S_ISUID|unix.S_ISGID) != 0 {
		err = unix.Fchmod(fd, want)
	}
	if err != nil {
		unix.Close(fd)
		n.unlinkNew(dir, nm)
		return nil, false, err
	}
	return os.NewFile(uintptr(fd), nm), true, nil
}

// own gives a new entry, open as fd, to the caller (when the daemon is
// root): by fd, never by name, so an entry swapped in under the name
// directly in BACKING is not given away. In a set-gid directory the
// group stays the directory's, as the kernel does.
func (n *Node) own(ctx context.Context, dir, fd int) error {
	c, ok := fuse.FromContext(ctx)
	if !ok || os.Geteuid() != 0 {
		return nil
	}
	gid := int(c.Gid)
	if st, err := backing.Fstat(dir); err == nil && st.Mode&unix.S_ISGID != 0 {
		gid = -1
	}
	return unix.Fchownat(fd, "", int(c.Uid), gid, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW)
}
