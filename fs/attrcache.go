package fs

import (
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
)

// attrTTL is how long the kernel may keep a file's attributes while
// every process sees the same ones: as go-fuse's loopback and libfuse
// do, so that a change made directly in BACKING shows within it.
const attrTTL = time.Second

// One kernel inode serves every version of a file and every process's
// view of it (a writer sees its pending size), and the kernel caches
// attributes per inode, not per process. So they are cached only while
// all views agree: no handle open for writing, and every reader on the
// committed version. Otherwise each stat asks the daemon (TTL 0), which
// answers for the caller (callerHandle). A writer with nothing pending
// (not written yet, or its close() committed all) agrees too (settle):
// its next change is a write, truncation or fallocate, at which the
// kernel drops what it cached itself.

// quiet reports whether every process sees f's committed attributes.
// f.mu is held.
func (f *file) quiet() bool {
	for h := range f.handles {
		if h.write { // fixed at open
			if h.settled.Load() != f.version+1 {
				return false
			}
			continue
		}
		if h.baseVer != f.version { // a reader's changes under f.mu (followLatest)
			return false
		}
	}
	return true
}

// settle marks a writer with nothing pending (at its open, or after a
// close) as showing the committed version (quiet), until it changes
// anything (changed) or is mapped. A new file's writer that has written
// nothing shows the empty file its create made: that version too, as
// long as no commit came since. h.mu is held.
func (h *handle) settle() {
	pending := h.p.dirty() && !(h.p.newFile && len(h.p.buf) == 0)
	if !h.write || pending || h.p.stage != nil || h.mapped.Load() {
		return
	}
	f := h.n.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if h.baseVer == f.version {
		h.settled.Store(f.version + 1)
		// Attributes may be cached from now on: only a write(2) after
		// this spares the next commit its invalidation (uncache).
		h.wrote = false
	}
}

// baseIsCurrent reports whether base is the file's committed version
// (an append or an in-place commit wrote its inode). The caller holds
// the file's commit lock.
func (h *handle) baseIsCurrent() bool {
	st, err := backing.Fstat(int(h.base.Fd()))
	if err != nil {
		return false
	}
	f := h.n.f
	f.mu.Lock()
	defer f.mu.Unlock()
	return keyOf(&st) == f.key
}

// attrTimeout is the TTL for attributes of f read at version ver. The
// check and the record of a TTL given are one step under f.mu: a writer
// opening or a commit landing after it sees the record and uncaches.
func (f *file) attrTimeout(ver uint64) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.kind == unix.S_IFREG && (f.version != ver || !f.quiet() || f.isRaw()) {
		return 0
	}
	f.cachedUntil = max(f.cachedUntil, time.Now().Add(attrTTL).UnixNano())
	return attrTTL
}

// uncache makes the kernel drop f's cached attributes (not its pages:
// every open is direct I/O, and a new shared map drops them itself),
// when it may hold some. Called at each commit, which the kernel does
// not see. A writer's open needs none: until it commits, what others
// have cached is still the committed version, and the kernel drops the
// writer's own view itself at each write and truncation.
//
// Nor does a commit whose handle had a write(2) since it last settled:
// the kernel dropped the cached size and times at that write
// (FUSE_STATX_MODSIZE, Linux 5.16+); from the write on the handle had
// something pending, so every reply carried TTL 0; a reply decided
// before the write and arriving after it is older than the write and
// not stored. Mode and owner stay valid, so the
// next open's permission check needs no GETATTR: one round trip less
// per `open >>`/print/close. Commits keep mode, owner and ACLs.
func (f *file) uncache(in *gofs.Inode) {
	f.mu.Lock()
	held := f.cachedUntil > time.Now().UnixNano()
	f.mu.Unlock()
	if held {
		// ENOENT: the kernel has forgotten the inode, nothing to drop.
		_ = in.NotifyContent(-1, 0)
	}
}

// permChanged makes the kernel drop the attributes and ACLs it holds in
// every node of f but n, through which a chmod, chown or ACL change just
// came (the kernel takes the new ones from that request's reply). With
// cache=version a file has several kernel inodes, and the kernel checks
// an open against the one it reaches: a reader's reopen of
// /proc/self/fd/N reaches the reader's node, whose mode it had cached
// (1 s). Called before the change's reply, so a revocation holds at
// once, as on a local file system.
func (n *Node) permChanged() {
	f := n.f
	f.mu.Lock()
	var others []*Node
	for o := range f.roles.nodes {
		if o != n {
			others = append(others, o)
		}
	}
	f.mu.Unlock()
	for _, o := range others {
		// ENOENT: the kernel has forgotten it, nothing to drop.
		_ = o.NotifyContent(-1, 0)
	}
}

// The kernel keeps one size for the inode, which lseek(SEEK_END) and a
// shared map's page faults use, and it stores there the size of every
// reply that carries attributes; each reply describes its caller's
// version. Another process's stat would then cut a writer's pending size
// (its SEEK_END after writing returned the older size: gdbm, creating a
// database while others stat it, failed), or a map's extent (a writer's
// dirty pages past it are dropped, a reader of a longer older version
// faults). So while a handle has a pending version or a shared map, a
// stat's reply whose size differs from the largest such size is made
// stale first: FUSE_NOTIFY_INVAL_INODE bumps the inode's attribute
// version, and the kernel then returns the reply to its caller without
// storing it. A SETATTR reply is always stored: there, no size below a
// map's extent is given (mappedSize).

// noteSize records the sizes kernelSize reads after a change (h.mu is
// held): the pending size of a writer, and what a mapped handle shows.
func (h *handle) noteSize() {
	if h.p.newFile {
		h.p.staged.Store(int64(len(h.p.buf)) + 1)
	}
	if h.p.stage != nil && !h.p.appends() {
		if st, err := backing.Fstat(int(h.p.stage.Fd())); err == nil {
			h.p.staged.Store(st.Size + 1)
		}
	}
	if h.mapped.Load() {
		_, _ = h.statLocked() // records it (seen)
	}
}

// mappedSize is the largest size a handle of f with a shared map shows,
// 0 if none; it never waits for a handle busy in a commit.
func (f *file) mappedSize() int64 {
	size, _ := f.kernelSize(false)
	return size
}

// kernelSize is the size the kernel's inode must keep: the largest that
// a handle with a shared map shows, or, if staged, that a writer's
// pending version has. in is the inode of one such handle (the kernel's:
// a lookup may hold another Inode for the file), nil if none.
func (f *file) kernelSize(staged bool) (size int64, in *gofs.Inode) {
	f.mu.Lock() // every stat asks: no copy of the handle list
	defer f.mu.Unlock()
	for h := range f.handles {
		if h.mapped.Load() {
			size, in = max(size, h.seen.Load()), h.n.EmbeddedInode()
		}
		if s := h.p.staged.Load(); staged && s > 0 {
			size, in = max(size, s-1), h.n.EmbeddedInode()
		}
	}
	return size, in
}

// keepSize makes a stat's reply of size for f stale (see above) when it
// would change the kernel's size away from what a handle needs.
func (f *file) keepSize(size uint64) {
	if k, in := f.kernelSize(true); in != nil && int64(size) < k {
		// ENOENT: the kernel has no inode to store the reply in.
		_ = in.NotifyContent(-1, 0)
	}
}
