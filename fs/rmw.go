package fs

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/exitwatch"
	"github.com/safefs/safefs/internal/rmwstate"
	"github.com/safefs/safefs/lockmgr"
	"github.com/safefs/safefs/rmw"
)

// Read-modify-write sessions (docs/sessions.md). A selected file's
// first open by a thread takes a session on it, and other threads'
// opens wait for it, those of the holder's own process too (a servlet's
// request threads): so an unlocked counter's read and its rewrite are
// not interleaved with another's. Child processes of the holder's
// process join its session (a shell script's cat). Sessions are kept in a
// table of their own, not in the commit lock: a commit never waits for
// a session, so a process outside every session (it opened before the
// file was selected, or gave up waiting) commits exactly as before.
// Each user has a table of its own, and a learned pair selects only its
// user's processes: one user's sessions never make another's opens wait.
// What selects an open, and learning, are package rmwstate's; this file
// is their FUSE side.

func (r *root) rmwStart() error {
	o := r.opts
	if !o.RMWAuto && len(o.RMWGlobs) == 0 {
		return nil
	}
	ex, err := exitwatch.New()
	if err != nil {
		return err
	}
	r.rmw = rmwstate.New(rmwstate.Config{Hold: o.RMWHold, Wait: o.RMWWait, Globs: o.RMWGlobs, Auto: o.RMWAuto,
		Dir: int(r.internal.Fd()), Procs: rmwstate.System{}, Log: r.log, LockHeld: r.book.HeldBy, Exits: ex})
	return nil
}

func (r *root) rmwStop() {
	if r.rmw != nil {
		r.rmw.Stop()
	}
}

// rmwHandle is a handle's part in sessions.
type rmwHandle struct {
	sess  *rmw.Session // the session it was opened under, nil if none
	read  bool         // read from: a write on it may be a read-modify-write
	tried bool         // the learning check ran for it
	// busy ends the postponement of its opener's sessions' hold: a file
	// opened for writing outside them while the opener held them (the
	// temporary file of sed -i, renamed over the file after its close).
	busy func()
}

// rmwEnter gives the calling thread a session on n if n is selected for
// it, waiting for another thread's session if need be; an open for
// reading by a request of a class judged read-only takes none. nil: no
// session.
func (n *Node) rmwEnter(ctx context.Context, flags uint32) *rmw.Session {
	x := n.r.rmw
	if x == nil {
		return nil
	}
	c, ok := fuse.FromContext(ctx)
	tid := callerTid(ctx)
	if !ok || tid == 0 {
		return nil
	}
	key, paths := n.rmwKey()
	as, sel, cls := x.Selected(tid, c.Uid, paths)
	if !sel {
		return nil
	}
	who := int32(tid) // the session's holder: the thread, or its parent
	if as != 0 {
		who = int32(as)
	}
	skip, unneeded := x.Gate(cls, isWrite(flags), tid)
	if skip {
		n.r.count.rmwReadOnly.Add(1)
		return nil
	}
	// The session is the calling thread's: FUSE requests carry it.
	start := time.Now()
	s, out, other := x.EnterCurrent(ctx, c.Uid, key, who, unneeded, n.rmwCurrentKey)
	if out.Waited() {
		n.r.count.rmwWaitNanos.Add(int64(time.Since(start)))
	}
	if s != nil && (out == rmw.Took || out == rmw.Granted) && !n.rmwClusterLock(s, c.Uid) {
		s.End() // no cluster lock within rmw_wait: no session, as after a local wait
		s, out = nil, rmw.GaveUp
	}
	if s != nil && (out == rmw.Took || out == rmw.Granted) {
		s.SetClass(cls)
	}
	if s != nil && isWrite(flags) {
		s.MarkWrote()
	}
	n.r.rmwCount(n, out, tid, other)
	if s != nil && (out == rmw.Took || out == rmw.Granted) {
		x.Watch(s)
	}
	return s
}

// rmwClusterLock: in a cluster, a new session of user uid also holds a
// lock on the file's path in etcd until it ends, so that sessions
// exclude across daemons. Its own key space (rmwLockKey): the session's
// holder commits the file under the commit lock meanwhile.
func (n *Node) rmwClusterLock(s *rmw.Session, uid uint32) bool {
	if !n.r.clustered() {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.r.opts.RMWWait)
	defer cancel()
	held, err := n.r.locks.Lock(ctx, "rmw session", rmwLockKey(uid, n.path()))
	if err != nil {
		n.r.log.Warn("rmw: no cluster lock for a session: opened without one", zap.String("path", logPath(n.path())), zap.Error(err))
		return false
	}
	s.SetLease(held.Lease())
	s.OnEnd(held.Release)
	return true
}

// rmwLive refuses (ErrFenced: ESTALE, bytes kept in rejected/) a commit
// made in a session whose cluster lock is tied to another lease than
// the commit's: that lock ended with its lease (this host paused or cut
// off past the TTL), another host's session may have read and committed
// meanwhile, and this one's write would silently undo that increment.
func (h *handle) rmwLive(lease int64) error {
	s := h.rmwSession()
	if s == nil || lease == 0 || s.Lease() == 0 || s.Lease() == lease {
		return nil
	}
	return fmt.Errorf("%w: its read-modify-write session's cluster lock ended with an earlier lease", lockmgr.ErrFenced)
}

// rmwSession is the session h's commit belongs to (see rmwCommitted),
// nil if none.
func (h *handle) rmwSession() *rmw.Session {
	x := h.n.r.rmw
	if x == nil {
		return nil
	}
	key, _ := h.n.rmwKey()
	s := x.Table(h.uid).Held(key)
	if s == nil || s != h.rmw.sess && uint32(s.Holder) != h.tid && uint32(s.Holder) != h.closer {
		return nil
	}
	return s
}

// rmwKeyAt is the session key of the file ino at path: the logical
// file, or in a cluster its path, as its session's cluster lock has.
// Another host's commit makes the path a new logical file here (a
// lookup finds a version this daemon did not make), and the holder's
// next open (the rewrite after the read) must join its session there.
func (r *root) rmwKeyAt(ino uint64, path string) uint64 {
	if r.clustered() {
		return lockmgr.NameID(path)
	}
	return ino
}

// rmwKeysOf are f's keys in the session tables (status).
func (r *root) rmwKeysOf(f *file) []uint64 {
	if !r.clustered() {
		return []uint64{f.ino}
	}
	var out []uint64
	for _, o := range f.nameList() {
		out = append(out, lockmgr.NameID(o.rel()))
	}
	return out
}

// rmwLockKey is the cluster lock of user uid's sessions of path: a name
// no file's commit lock has, and as local ID the one the cluster backend
// gives that name anyway.
func rmwLockKey(uid uint32, path string) lockmgr.Key {
	name := "\x00rmw/" + strconv.FormatUint(uint64(uid), 10) + "/" + path
	return lockmgr.Key{ID: lockmgr.NameID(name), Name: name}
}

// names are n's paths below the mount root.
func (n *Node) names() []string {
	var out []string
	for _, o := range n.f.nameList() {
		out = append(out, o.rel())
	}
	return out
}

func (r *root) rmwCount(n *Node, out rmw.Outcome, tid uint32, other int32) {
	c := &r.count
	switch out {
	case rmw.Took:
		c.rmwSessions.Add(1)
	case rmw.Granted:
		c.rmwSessions.Add(1)
		c.rmwWaits.Add(1)
	case rmw.Cycle:
		c.rmwCycles.Add(1)
		r.rmw.Warn("rmw: waiting would close a cycle: opened without a session", n.path(), tid, other)
	case rmw.GaveUp:
		c.rmwWaits.Add(1)
		c.rmwGaveUp.Add(1)
		r.rmw.Warn("rmw: waited rmw_wait for another thread's session: opened without one", n.path(), tid, other)
	case rmw.Stopped:
		c.rmwWaits.Add(1)
	case rmw.Unneeded:
		c.rmwWaits.Add(1)
		c.rmwReadOnly.Add(1)
	}
}

// rmwOpened ties a new handle to its session (or closes the session if
// the open failed) and, in auto mode, learns from the open.
func (n *Node) rmwOpened(h *handle, s *rmw.Session, flags uint32) {
	x := n.r.rmw
	if x == nil {
		return
	}
	if h == nil {
		s.Close()
		return
	}
	h.rmw.sess = s
	if s == nil && isWrite(flags) {
		h.rmw.busy = x.Table(h.uid).Busy(int32(h.tid))
	}
	if x.Opened(n.f.ino, n.path, h.tid, h.tgid, h.uid, isWrite(flags), s != nil) {
		h.rmw.tried = true
	}
}

// rmwWrite is a write on h (h.mu held): the first write on a handle it
// read from, with no session, is a read-modify-write through one
// descriptor (open +<, read, rewrite).
func (h *handle) rmwWrite() {
	x := h.n.r.rmw
	if x == nil || !x.Auto() || !h.rmw.read || h.rmw.tried || h.rmw.sess != nil || h.tgid == 0 {
		return
	}
	h.rmw.tried = true
	x.Learn(h.n.path(), h.tgid, h.uid, false)
}

// rmwCommitted ends the session a commit of h completes: the holder
// thread's (or its family's, through a handle opened in the session)
// first commit of the file. Another thread's commit of a handle it
// opened outside the session does not end it.
func (h *handle) rmwCommitted() {
	s := h.rmwSession()
	if s == nil {
		// Perhaps a temporary file its committer renames over a file
		// it holds a session on: that session's hold starts again.
		if x := h.n.r.rmw; x != nil {
			x.Table(h.uid).Rearm(int32(h.tid))
		}
		return
	}
	// A write that came through a handle opened outside the session
	// (a create) still makes its class a writing one.
	s.EndWritten()
}

// rmwBusy keeps the sessions of h's committer from ending by their hold
// while it commits (a temporary file it will rename over theirs, fsynced),
// until the returned func is called. A session this commit ends
// (rmwCommitted) is not armed again.
func (h *handle) rmwBusy() (done func()) {
	x := h.n.r.rmw
	if x == nil {
		return func() {}
	}
	return x.Table(h.uid).Busy(int32(h.tid))
}

// rmwClose: the handle is released.
func (h *handle) rmwClose() {
	s := h.rmw.sess
	h.rmw.sess = nil
	s.Close()
	if h.rmw.busy != nil {
		h.rmw.busy()
		h.rmw.busy = nil
	}
}

// CheckRMWGlobs reports a malformed glob of Options.RMWGlobs.
func CheckRMWGlobs(globs []string) error { return rmw.Globs(globs).Valid() }

// rmwNamesLock is held by a rename from its change of names to its move
// of a session (rmwRenamed): an open's check of the file at its path
// (rmwCurrentKey) sees both or neither.
func (n *Node) rmwNamesLock() (unlock func()) {
	x := n.r.rmw
	if x == nil {
		return func() {}
	}
	x.Names.Lock()
	return x.Names.Unlock
}

// rmwRenamed: src was renamed over dst (now at path), under
// rmwNamesLock: the session on dst moves to src (rmwstate.Renamed).
func (n *Node) rmwRenamed(ctx context.Context, src, dst *Node, path string) (after func()) {
	x := n.r.rmw
	c, ok := fuse.FromContext(ctx)
	tid := callerTid(ctx)
	if x == nil || !ok || tid == 0 || src == nil || dst == nil || src == dst || src.f.kind != unix.S_IFREG {
		return func() {}
	}
	return x.Renamed(tid, c.Uid, dst.f.ino, src.f.ino, path)
}

// rmwCurrentKey is the key of the file now at n's path.
func (n *Node) rmwCurrentKey() uint64 {
	key, _ := n.rmwKey()
	return key
}

// rmwKey is the key of n's sessions and its paths: a file a rename
// replaced has none, and its opens (the kernel resolved the name before
// the rename) wait for the session of the file now at its path.
func (n *Node) rmwKey() (uint64, []string) {
	x := n.r.rmw
	x.Names.RLock()
	defer x.Names.RUnlock()
	if paths := n.names(); len(paths) > 0 {
		return n.r.rmwKeyAt(n.f.ino, n.path()), paths
	}
	key, p := x.Resolve(n.f.ino)
	if p == "" {
		return n.f.ino, nil
	}
	return n.r.rmwKeyAt(key, p), []string{p}
}

// rmwReplaced reports whether a rename replaced n's file while its open
// waited for s, or just before it took s: the open must not read the
// replaced version. The kernel looks the name up again, and the retry
// finds the new file and joins the session moved there.
func (n *Node) rmwReplaced(s *rmw.Session) bool {
	if s == nil {
		return false
	}
	switch {
	case s.Key() != n.f.ino:
		s.Close()
	case len(n.f.nameList()) == 0:
		s.End() // on a file no name leads to: no one else's
	default:
		return false
	}
	return true
}
