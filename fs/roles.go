package fs

import (
	"context"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
)

// Kernel inodes by role (Options.VersionCache, docs/design.md, "Versions and kernel
// inodes"). The kernel keeps one page cache and one size per kernel inode,
// so a logical file may have several (nodes): a lookup gives the node of
// the file's current generation (roles.kgen), and the opens decide what
// that node is:
//   - fresh: looked up, not opened yet;
//   - reader: only read-only opens of the version it was made for
//     (nodeRoles.ver) had it: served from the page cache (KEEP_CACHE),
//     or with passthrough=read from that version's backing file
//     (roles_pt.go); its pages and size are that version's for its
//     whole life;
//   - direct: a writer opened it, or a reader of a later version: direct
//     I/O, following versions, as every node is without the option.
//
// An open that may not use the node it came to is answered ESTALE after
// the file moves to a new generation: the kernel looks the name up again
// (do_filp_open retries once, with LOOKUP_REVAL) and opens that node. A
// commit moves the file on when its node is not direct, or readers came
// to it. Script locks are then the daemon's (locks=daemon): processes may
// hold one file through different kernel inodes.
type nodeRole int

const (
	roleFresh nodeRole = iota
	roleReader
	roleDirect
)

// roles is a file's kernel nodes (under file.mu).
type roles struct {
	kgen    uint64             // identity generation of the node lookups give
	readers map[*Node]struct{} // reader nodes, told of in-place commits
	// current is the last node of the current generation an open
	// reached, nil once forgotten.
	current *Node
	// writers: threads whose write open was sent on, when, and to which
	// generation: their retries' lookups get it (routeOf), and until
	// each one's retry arrives (or retryWindow passed) its node starts
	// direct and other opens there are sent on (routedElsewhere): its
	// retry must not meet cached readers again, nor readers its
	// truncation. sent: the same for readers, whose retry is never sent
	// on again.
	writers threadTimes
	sent    threadTimes
	// movedAt: when an open was last sent to a new node that no open
	// has reached since (0: none). The kernel may forget that node
	// between the two lookups of its retry; the file must stay in the
	// tables meanwhile (else the retry meets a new logical file, which
	// another reader may cache: a second ESTALE). Only for retryWindow:
	// a move no open followed (the last commit before an rm) kept a
	// removed file's ghost and table entries for good.
	movedAt int64
	live    int // nodes made and not forgotten (candidates.go)
	// nodes are those nodes, whose attributes a change of permissions
	// drops (permChanged).
	nodes map[*Node]struct{}
	// pt: nodes with a backing file registered (roles_pt.go); appended:
	// an append was committed, no reader is passed through.
	pt       map[*Node]struct{}
	appended bool
}

// nodeRoles is a node's part (under its file's mu).
type nodeRoles struct {
	role   nodeRole
	ver    uint64 // the file's version when the node was made
	key    key    // and the backing inode of that version
	gen    uint64 // its identity generation
	cached int    // open handles reading through the page cache
	// directReads counts read-only opens of a direct node: readers that
	// a node of the next version would serve from the page cache.
	directReads int
	wrote       int64 // when a writer last opened it (ns), 0: never
	pt          ptNode
	// fd: a descriptor of key while the node is a reader of the file's
	// version, for the next reader's open (readerfd.go); fdUsed: when
	// it was last taken (ns).
	fd     *sharedFile
	fdUsed int64
	// opening: threads whose open of n was let through and has no
	// handle yet, true for a writer: a reader and a writer deciding at
	// once must see each other (othersHold sees handles only).
	opening map[uint32]bool
	// rawMode: how the raw node serves raw opens; rawCached: its raw
	// handles open through its page cache (rawfile.go).
	rawMode   rawMode
	rawCached int
}

// threadTimes is when each thread was sent on (ns), and the generation
// its retry's lookups get (route).
type threadTimes map[uint32]sentOn

type sentOn struct {
	at  int64
	gen uint64
}

// live reports whether the retry sent on at s.at may still come at now.
func (s sentOn) live(now int64) bool { return now-s.at < int64(retryWindow) }

// note records that thread tid was sent on at now, to generation gen.
func (m *threadTimes) note(tid uint32, now int64, gen uint64) {
	if *m == nil {
		*m = threadTimes{}
	}
	(*m)[tid] = sentOn{now, gen}
}

// prune forgets the threads sent on retryWindow ago or more: their
// retries are over.
func (m threadTimes) prune(now int64) {
	for t, s := range m {
		if !s.live(now) {
			delete(m, t)
		}
	}
}

// toGen reports whether a thread other than tid was sent on to
// generation gen and has not reached it.
func (m threadTimes) toGen(tid uint32, gen uint64, now int64) bool {
	for t, s := range m {
		if t != tid && s.gen == gen && s.live(now) {
			return true
		}
	}
	return false
}

// readerMoveAfter is how long after its last writer's open a direct
// node sends readers to a node of their own (readerMayOpen): a script
// that reads then rewrites a file keeps one node.
const readerMoveAfter = time.Second

// retryWindow bounds the kernel's retry of an open answered ESTALE
// (immediate: the same system call walks the path again).
const retryWindow = time.Second

// identityNow is the identity of the node a lookup by thread tid gets
// now: the generation it was sent on to while its retry is on its way
// (so that two opens sent on at once do not meet on the newest node),
// else the current one.
func (f *file) identityNow(tid uint32) gofs.StableAttr {
	f.mu.Lock()
	defer f.mu.Unlock()
	return gofs.StableAttr{Mode: f.kind, Ino: f.ino, Gen: f.routeOf(tid)}
}

// routeOf is the generation thread tid's lookups get (f.mu held).
func (f *file) routeOf(tid uint32) uint64 {
	now := time.Now().UnixNano()
	for _, m := range []threadTimes{f.roles.writers, f.roles.sent} {
		if s, ok := m[tid]; ok && tid != 0 && s.live(now) {
			return s.gen
		}
	}
	return f.curGen()
}

// routedElsewhere reports whether n's generation was given to another
// thread's retry that has not reached it (f.mu held): n is kept for it.
func (n *Node) routedElsewhere(tid uint32) bool {
	now := time.Now().UnixNano()
	f := n.f
	return f.roles.writers.toGen(tid, n.rl.gen, now) || f.roles.sent.toGen(tid, n.rl.gen, now)
}

// made records that node n of generation gen was just made for f: it
// starts fresh for the version f has now, or direct when a writer sent
// on is on its way to it.
// (Two lookups may each make one; go-fuse keeps one, so both start alike;
// the request's end forgets the one go-fuse dropped: candidates.)
func (r *root) made(ctx context.Context, n *Node, gen uint64) {
	if !r.opts.VersionCache {
		return
	}
	r.cands.add(ctx, n)
	f := n.f
	k := r.ids.current(f) // under the tables' lock; a commit in between only makes it not cache
	f.mu.Lock()
	defer f.mu.Unlock()
	f.roles.live++
	if f.roles.nodes == nil {
		f.roles.nodes = map[*Node]struct{}{}
	}
	f.roles.nodes[n] = struct{}{}
	r.ids.revive(f) // a forget may have dropped it after the lookup found it
	n.rl.ver, n.rl.key, n.rl.gen = f.version, k, gen
	if now := time.Now().UnixNano(); f.roles.writers.toGen(0, gen, now) {
		// As if written now: readers move on after readerMoveAfter.
		n.rl.role, n.rl.wrote = roleDirect, now
	}
}

// opened notes that n, which an open reached, is the node lookups give
// (f.mu held): commits look at its role.
func (n *Node) opened() {
	if f := n.f; n.rl.gen == f.curGen() {
		f.roles.current = n
		f.roles.movedAt = 0
	}
}

// curGen is the generation of the node lookups give (f.mu held).
func (f *file) curGen() uint64 {
	if f.roles.kgen != 0 {
		return f.roles.kgen
	}
	return f.gen
}

// moveOn gives f's lookups a node of a new generation (f.mu held), and
// drops the kernel's entries of its names apart: the kernel may hold a
// directory's lock while it waits for a request that waits for us.
func (f *file) moveOn(r *root) {
	if f.rw.gen != 0 {
		return // a raw file's opens share its raw node (rawfile.go)
	}
	f.roles.kgen = r.ids.newGen()
	f.roles.movedAt = time.Now().UnixNano()
	go f.moveNames()
}

// handle returns a handle of f opened through n that is accepts,
// nil if none (f.mu held).
func (n *Node) handle(is func(*handle) bool) *handle {
	for h := range n.f.handles {
		if h.n == n && is(h) {
			return h
		}
	}
	return nil
}

// markDirect makes n direct (a writer's create).
func (n *Node) markDirect(tid uint32) {
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	n.writerCame(tid)
}

// becomeDirect makes n a direct node (f.mu held). Its pages are dropped
// by the kernel at the open that follows (no KEEP_CACHE).
func (n *Node) becomeDirect() {
	if n.rl.role == roleReader {
		delete(n.f.roles.readers, n)
	}
	n.rl.role = roleDirect
	n.dropReaderFd()
}

// openFlags are the OPEN reply's flags for h on n.
func (n *Node) openFlags(ctx context.Context, h *handle, st *unix.Stat_t) uint32 {
	f := n.f
	if !n.r.opts.VersionCache || f.kind != unix.S_IFREG || h.write || h.private {
		return fuse.FOPEN_DIRECT_IO
	}
	// The version opened: a commit renames its new version in before it
	// counts it (version), and an open in between reads the new one.
	var err error
	if st == nil {
		var s unix.Stat_t
		s, err = backing.Fstat(int(h.base.Fd()))
		st = &s
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil || keyOf(st) != n.rl.key || n.rl.role == roleDirect || n.rl.ver != f.version || h.baseVer != f.version || f.lockedOnce.Load() || f.isRaw() {
		// Another version than the node's pages: direct. The node
		// stays a reader while its cached readers are open, so that
		// no writer joins them. A file scripts lock too: a lock
		// grant moves its reader to the latest version (followLatest).
		if n.rl.cached == 0 {
			n.becomeDirect()
		}
		n.rl.directReads++
		n.opened()
		if n.ptShare(ctx, h) {
			n.r.count.passthroughDirect.Add(1) // its maps are the node's
		}
		return fuse.FOPEN_DIRECT_IO
	}
	n.opened()
	n.rl.role = roleReader
	n.rl.cached++
	h.cached = true
	n.keepReaderFd(h)
	if f.roles.readers == nil {
		f.roles.readers = map[*Node]struct{}{}
	}
	f.roles.readers[n] = struct{}{}
	if n.ptReader(ctx, h, st) {
		return h.closeFlags()
	}
	return fuse.FOPEN_KEEP_CACHE | h.closeFlags()
}

// closeFlags spares a reader's close() its FLUSH, which only drops the
// closing process's fcntl locks on the file, while no script lock has
// ever been asked for on it. Locks taken through the reader after all
// end at its RELEASE (releaseOFD), its flock waits as if closed
// (closedHolders); a process's lock taken through another descriptor
// outlives this one's close (docs/threat-model.md, limitations).
func (h *handle) closeFlags() uint32 {
	if h.n.f.lockedOnce.Load() {
		return 0
	}
	h.noFlush.Store(true)
	return fuse.FOPEN_NOFLUSH
}

// cachedReleased ends h's part in its node's page cache.
func (h *handle) cachedReleased() {
	if !h.cached && !h.ptNode {
		return
	}
	h.n.f.mu.Lock()
	if h.cached {
		h.n.rl.cached--
	}
	h.ptNodeReleased()
	h.n.f.mu.Unlock()
}

// rolesCommitted follows a commit of f: a commit that wrote the
// committed inode itself (append, in place) changed what reader nodes
// hold in their pages and size; and the next opener must get a node of
// the new version unless the name's node is direct.
func (r *root) rolesCommitted(f *file, onBase bool) {
	if !r.opts.VersionCache || f.kind != unix.S_IFREG {
		return
	}
	f.mu.Lock()
	old := f.takeReaderFds() // their version is not the file's now
	var stale []*Node
	if onBase {
		for n := range f.roles.readers {
			stale = append(stale, n)
		}
	}
	// A direct node stays while only writers use it (a log appended
	// to, a counter under flock): moving it costs a lookup per commit.
	cur := f.roles.current
	if cur != nil && cur.rl.gen == f.curGen() && (cur.rl.role != roleDirect || cur.rl.directReads > 0) {
		f.moveOn(r)
	}
	f.mu.Unlock()
	if len(old) > 0 {
		go releaseAll(old) // off the committing close()
	}
	// Before the close returns: a reader told of it must see the bytes.
	for _, n := range stale {
		_ = n.NotifyContent(0, 0)
	}
}

// moveNames drops the kernel's entries of f's names: its next lookup
// gets the node of the current generation.
func (f *file) moveNames() {
	for _, o := range f.nameList() {
		_ = o.dir.NotifyEntry(o.name)
	}
}

// versionAttr: own reports whether a stat of n describes n's version
// rather than its caller's (a fresh or reader node, whose size and
// pages are that version's: never a writer's pending size); h is a
// handle reading that version through n, nil for the committed one.
func (n *Node) versionAttr() (h *handle, own bool) {
	f := n.f
	if !n.r.opts.VersionCache || f.kind != unix.S_IFREG {
		return nil, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if n.rl.role == roleDirect {
		return nil, false
	}
	return n.handle(func(h *handle) bool { return h.cached }), true
}

// nodeHandle is the caller's handle most likely meant by a stat of n
// among those opened through n (with several kernel nodes per file, the
// node tells a process's writer from its reader), nil if none.
func (n *Node) nodeHandle(tid, tgid uint32) *handle {
	if !n.r.opts.VersionCache || tgid == 0 {
		return nil
	}
	for _, h := range n.f.ranked(tid, tgid) {
		if h.n == n {
			return h
		}
	}
	return nil
}

// versionEntry makes a lookup's reply agree with a version's node: the
// kernel stores its size in the node, whose pages readers read up to it.
// A node that readers hold gets its version's attributes; a fresh one
// whose stat may predate a commit (not stable) never caches.
func versionEntry(in *gofs.Inode, out *fuse.EntryOut, stable bool) {
	n, ok := in.Operations().(*Node)
	if !ok || !n.r.opts.VersionCache || n.f.kind != unix.S_IFREG {
		return
	}
	n.f.mu.Lock()
	if n.rl.role == roleFresh && !stable {
		n.rl.ver = staleVer
	}
	n.f.mu.Unlock()
	if h, _ := n.versionAttr(); h != nil {
		if st, err := h.stat(); err == nil {
			fillAttr(&out.Attr, &st, n.f.ino)
		}
	}
}

// forgettable reports whether the kernel's forget of n may drop its
// logical file: not while another node of it lives. (Nor while an open
// is on its way to a new one: root.forget waits for that.)
func (n *Node) forgettable() bool {
	if !n.r.opts.VersionCache {
		return true
	}
	f := n.f
	f.mu.Lock()
	defer f.mu.Unlock()
	n.dropReaderFd()
	delete(f.roles.readers, n)
	if f.roles.current == n {
		f.roles.current = nil
	}
	f.roles.live--
	delete(f.roles.nodes, n)
	return f.roles.live <= 0
}

// moving is how long an open sent to a new node may still take to
// reach it (f.mu held); 0 when none may.
func (f *file) moving() time.Duration {
	if f.roles.movedAt == 0 {
		return 0
	}
	return max(0, retryWindow-time.Duration(time.Now().UnixNano()-f.roles.movedAt))
}
