package fs

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"

	"github.com/safefs/safefs/internal/exitwatch"
	"github.com/safefs/safefs/internal/loglimit"
	"github.com/safefs/safefs/internal/proc"
	"github.com/safefs/safefs/internal/recent"
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

// rmwState is a mount's session table and selection.
type rmwState struct {
	hold    time.Duration
	tablesM sync.Mutex
	tables  map[uint32]*rmw.Table // by uid
	globs   rmw.Globs
	auto    bool
	learned *rmw.Learned
	classes *rmw.Classes // of the learned pairs' requests
	reads   *rmw.Reads
	writes  *rmw.Reads // who opened which file for writing (rmw_family.go)
	moves   *rmw.Moves // renames over files (rmw_family.go)
	// names orders a rename's change of names and its move of a
	// session against an open's check of which file is at its path.
	names sync.RWMutex
	// written: files opened for writing or renamed over lately: only
	// their readers' parents are read (rmw_family.go).
	written recent.Set[uint64]
	exits   *exitwatch.Watch
	saveMu  sync.Mutex
	warnLog loglimit.Limit
	// locking: the (file, program) pairs seen holding a lock when they
	// rewrote what they read, not checked again for a while: a flock
	// counter would otherwise have every process's descriptors read in
	// /proc at every commit (about 85 system calls each, measured).
	locking recent.Set[rmw.Pair]
}

// table is the session table of user uid.
func (x *rmwState) table(uid uint32) *rmw.Table {
	x.tablesM.Lock()
	defer x.tablesM.Unlock()
	t := x.tables[uid]
	if t == nil {
		t = rmw.New(x.hold)
		x.tables[uid] = t
	}
	return t
}

// allTables are the users' session tables.
func (x *rmwState) allTables() map[uint32]*rmw.Table {
	x.tablesM.Lock()
	defer x.tablesM.Unlock()
	return maps.Clone(x.tables)
}

// lockingKeep is how long a pair seen locking is not checked again; a
// program that drops its lock meanwhile is learned that much later.
const lockingKeep = 10 * time.Second

// maxLockingPairs bounds the memory: past it the set starts afresh.
const maxLockingPairs = 4096

// rmwReadKeep is how long a read is remembered as the first half of a
// read-modify-write: a CGI script rewrites within milliseconds.
const rmwReadKeep = 30 * time.Second

func (r *root) rmwStart() error {
	o := r.opts
	if !o.RMWAuto && len(o.RMWGlobs) == 0 {
		return nil
	}
	ex, err := exitwatch.New()
	if err != nil {
		return err
	}
	x := &rmwState{hold: o.RMWHold, tables: map[uint32]*rmw.Table{}, globs: o.RMWGlobs, auto: o.RMWAuto,
		learned: rmw.NewLearned(), classes: rmw.NewClasses(), reads: rmw.NewReads(rmwReadKeep), exits: ex,
		locking: recent.Set[rmw.Pair]{Keep: lockingKeep, Max: maxLockingPairs},
		writes:  rmw.NewReads(rmwReadKeep), written: recent.Set[uint64]{Keep: writtenKeep, Max: maxWritten},
		moves: rmw.NewMoves(rmwReadKeep)}
	if o.RMWAuto {
		x.learned = r.loadLearned()
	}
	x.classes.OnJudged(func(c *rmw.Class) {
		r.log.Info("rmw: a request class is judged read-only: its read-only opens take no session",
			zap.String("path", logPath(c.Pair.Path)), zap.String("program", c.Pair.Cmd), zap.Uint32("uid", c.Pair.UID),
			zap.String("class", c.Features), zap.Int("sessions_without_a_write", rmw.ReadOnlyAfter))
	})
	r.rmw = x
	r.log.Info("rmw sessions on", zap.Bool("auto", x.auto), zap.Strings("globs", x.globs),
		zap.Duration("rmw_hold", o.RMWHold), zap.Duration("rmw_wait", o.RMWWait), zap.Int("learned", x.learned.Len()))
	return nil
}

func (r *root) rmwStop() {
	if r.rmw != nil {
		r.rmw.exits.Stop()
	}
}

// rmwHandle is a handle's part in sessions.
type rmwHandle struct {
	sess  *rmw.Session // the session it was opened under, nil if none
	read  bool         // read from: a write on it may be a read-modify-write
	tried bool         // the learning check ran for it
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
	as, sel, cls := n.rmwSelected(tid, c.Uid, paths)
	if !sel {
		return nil
	}
	who := int32(tid) // the session's holder: the thread, or its parent
	if as != 0 {
		who = int32(as)
	}
	var unneeded <-chan struct{}
	switch {
	case cls == nil:
	case isWrite(flags):
		if cls.Wrote() {
			n.r.log.Warn("rmw: a request class judged read-only opened the file for writing: its requests take sessions again",
				zap.String("path", logPath(cls.Pair.Path)), zap.String("program", cls.Pair.Cmd), zap.Uint32("uid", cls.Pair.UID),
				zap.String("class", cls.Features), zap.Uint32("pid", proc.Tgid(tid)))
		}
	case cls.ReadOnly():
		n.r.count.rmwReadOnly.Add(1)
		return nil
	default:
		unneeded = cls.Judged() // a wait ends when the class is judged read-only
	}
	// The session is the calling thread's: FUSE requests carry it.
	start := time.Now()
	s, out, other := n.rmwEnterCurrent(ctx, x.table(c.Uid), key, who, unneeded) // rmw_family.go
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
		x.exits.Add(s.Holder, s)
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
	s := x.table(h.uid).Held(key)
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

// rmwSelected reports whether the opens of n by thread tid of user uid
// take sessions, the process they take it in the name of (0: the thread
// itself), and for a learned pair the class of the process's request
// (nil: every open takes a session). Globs select every process;
// learned paths only the programs that user was seen running when it
// did a read-modify-write on them, and the children of a family pair's.
func (n *Node) rmwSelected(tid, uid uint32, paths []string) (uint32, bool, *rmw.Class) {
	x := n.r.rmw
	for _, p := range paths {
		if x.globs.Match(p) {
			return 0, true, nil
		}
	}
	if !x.auto {
		return 0, false, nil
	}
	for _, p := range paths {
		if x.learned.HasPath(uid, p) {
			// A program that cannot be told takes a session: a
			// session costs a reader time (its user's only), a
			// missed one an increment.
			pid := proc.TgidOrSelf(tid)
			pair := rmw.Pair{UID: uid, Path: p, Cmd: proc.Program(pid)}
			if pair.Cmd == "" {
				return 0, true, nil
			}
			if !x.learned.Has(pair) {
				return n.rmwParentSelected(pid, pair) // rmw_family.go
			}
			return 0, true, x.classes.Get(pair, proc.RequestFeatures(pid))
		}
	}
	return 0, false, nil
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
		r.rmwWarn("rmw: waiting would close a cycle: opened without a session", n, tid, other)
	case rmw.GaveUp:
		c.rmwWaits.Add(1)
		c.rmwGaveUp.Add(1)
		r.rmwWarn("rmw: waited rmw_wait for another thread's session: opened without one", n, tid, other)
	case rmw.Stopped:
		c.rmwWaits.Add(1)
	case rmw.Unneeded:
		c.rmwWaits.Add(1)
		c.rmwReadOnly.Add(1)
	}
}

// rmwWarn logs one line naming the path and both threads with their
// processes.
func (r *root) rmwWarn(msg string, n *Node, tid uint32, other int32) {
	ok, skipped := r.rmw.warnLog.Allow()
	if !ok {
		return
	}
	pid, holder := proc.Tgid(tid), int32(proc.Tgid(uint32(other)))
	r.log.Warn(msg, zap.String("path", logPath(n.path())),
		zap.Uint32("pid", pid), zap.Uint32("tid", tid), zap.String("cmdline", proc.ShortCmdline(pid)),
		zap.Int32("holder_pid", holder), zap.Int32("holder_tid", other), zap.String("holder_cmdline", proc.ShortCmdline(uint32(holder))),
		zap.Int("not_logged_before", skipped))
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
	if !x.auto || h.tgid == 0 {
		return
	}
	if !isWrite(flags) {
		n.rmwNoteRead(h) // rmw_family.go
		return
	}
	n.rmwNoteWrite(h)
	if s != nil {
		return
	}
	// A read and a write by one thread: a thread's session serializes
	// them (a pool thread that writes what another read is not learned
	// from). A read by a child of the writer's process: a family pair.
	switch {
	case x.reads.Read(n.f.ino, int32(h.tid)):
		h.rmw.tried = true
		n.r.rmwLearn(n.path(), h.tgid, h.uid, false)
	case x.reads.ChildRead(n.f.ino, int32(h.tgid)) != 0:
		h.rmw.tried = true
		n.r.rmwLearn(n.path(), h.tgid, h.uid, true)
	}
}

// rmwWrite is a write on h (h.mu held): the first write on a handle it
// read from, with no session, is a read-modify-write through one
// descriptor (open +<, read, rewrite).
func (h *handle) rmwWrite() {
	x := h.n.r.rmw
	if x == nil || !x.auto || !h.rmw.read || h.rmw.tried || h.rmw.sess != nil || h.tgid == 0 {
		return
	}
	h.rmw.tried = true
	h.n.r.rmwLearn(h.n.path(), h.tgid, h.uid, false)
}

// rmwLearn learns (path, program) for process pid of user uid, which
// read the file (itself, or through a child: family) and now writes it,
// unless it holds a flock or fcntl lock: then it serializes itself, and
// a session could only add a wait. A family pair is learned only for a
// process of one thread: its children open the file in its name.
func (r *root) rmwLearn(path string, pid, uid uint32, family bool) {
	x := r.rmw
	// A lock held through this daemon is known without /proc: a flock
	// counter's writes (the lock holder's, on its critical path) read
	// no command line.
	if x.learned.Full(uid) || r.book.HeldBy(pid) {
		return
	}
	p := rmw.Pair{UID: uid, Path: path, Cmd: proc.Program(pid)}
	now := time.Now()
	known := x.learned.Has(p) && (!family || x.learned.IsFamily(p))
	if p.Cmd == "" || known || x.locking.Has(p, now) || family && !proc.SingleThreaded(pid) {
		return
	}
	if held, known := proc.HoldsLock(pid); held {
		if known {
			x.locking.Add(p, now)
		}
		return
	}
	add := x.learned.Add
	if family {
		add = x.learned.AddFamily
	}
	if !add(p) {
		return
	}
	if c := x.classes.Get(p, proc.RequestFeatures(pid)); c != nil {
		c.Wrote() // the learning request's class writes
	}
	r.log.Info("rmw: learned a read-modify-write without a lock: its opens of this file take sessions",
		zap.String("path", logPath(p.Path)), zap.String("program", p.Cmd), zap.Uint32("uid", uid), zap.Uint32("pid", pid),
		zap.Bool("family", family))
	if x.learned.Full(uid) {
		r.log.Warn("rmw: no more pairs are learned for this user (its share, or all users' but root's, is full)",
			zap.Uint32("uid", uid), zap.Int("per_uid", rmw.MaxPerUID), zap.Int("all_users", rmw.MaxLearned))
	}
	r.saveLearned(x)
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
			x.table(h.uid).Rearm(int32(h.tid))
		}
		return
	}
	// A write that came through a handle opened outside the session
	// (a create) still makes its class a writing one.
	if c := s.Class(); c != nil {
		c.Wrote()
	}
	s.MarkWrote()
	s.End()
}

// rmwClose: the handle is released.
func (h *handle) rmwClose() {
	s := h.rmw.sess
	h.rmw.sess = nil
	s.Close()
}

// CheckRMWGlobs reports a malformed glob of Options.RMWGlobs.
func CheckRMWGlobs(globs []string) error { return rmw.Globs(globs).Valid() }
