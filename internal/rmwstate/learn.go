package rmwstate

import (
	"time"

	"go.uber.org/zap"

	"github.com/safefs/safefs/internal/loglimit"
	"github.com/safefs/safefs/rmw"
)

// Learning (rmw=auto). A thread that reads a file and writes it outside
// a session, without a lock, is a read-modify-write to serialize: its
// (file, program) pair is learned. A shell script reads a file through
// a child (`n=$(cat f)`) and writes it itself (`> f`), or has a child
// read it into a temporary file that another child renames over it
// (`awk ... f > f.$$ && mv f.$$ f`); sed -i reads it and renames a
// temporary file over it. Learned as a family pair: the script's
// process, whose children open the file in its name, so that one
// session spans the request's read and its write (an open, or a rename
// over the file).

// Opened learns from an open of file ino by thread tid of process pid
// (0: unknown) of user uid, for writing or not, which took a session or
// not; path tells the file's path. tried: the learning check ran.
func (x *State) Opened(ino uint64, path func() string, tid, pid, uid uint32, write, sess bool) (tried bool) {
	if !x.cfg.Auto || pid == 0 {
		return false
	}
	if !write {
		x.noteRead(ino, tid)
		return false
	}
	x.noteWrite(ino, tid)
	if sess {
		return false
	}
	// A read and a write by one thread: a thread's session serializes
	// them (a pool thread that writes what another read is not learned
	// from). A read by a child of the writer's process: a family pair.
	switch {
	case x.reads.Read(ino, int32(tid)):
		x.Learn(path(), pid, uid, false)
	case x.reads.ChildRead(ino, int32(pid)) != 0:
		x.Learn(path(), pid, uid, true)
	default:
		return false
	}
	return true
}

// noteRead remembers an open of ino for reading by tid, with the
// reader's parent when the file was written lately (a file only ever
// read costs no look-up of the parent).
func (x *State) noteRead(ino uint64, tid uint32) {
	parent := uint32(0)
	if x.written.Has(ino, time.Now()) {
		parent = x.cfg.Procs.Parent(tid)
	}
	x.reads.NoteChild(ino, int32(tid), int32(parent))
}

// noteWrite remembers an open of ino for writing by tid: its file is
// one whose readers' parents are read, and a rename of it over another
// file may be the write of a read-modify-write.
func (x *State) noteWrite(ino uint64, tid uint32) {
	x.written.Add(ino, time.Now())
	x.writes.Note(ino, int32(tid))
}

// Learn learns (path, program) for process pid of user uid, which read
// the file (itself, or through a child: family) and now writes it,
// unless it holds a flock or fcntl lock: then it serializes itself, and
// a session could only add a wait. A family pair is learned only for a
// process of one thread: its children open the file in its name.
func (x *State) Learn(path string, pid, uid uint32, family bool) {
	// A lock held through this daemon is known without /proc: a flock
	// counter's writes (the lock holder's, on its critical path) read
	// no command line.
	if x.learned.Full(uid) || x.cfg.LockHeld(pid) {
		return
	}
	procs := x.cfg.Procs
	p := rmw.Pair{UID: uid, Path: path, Cmd: procs.Program(pid)}
	now := time.Now()
	known := x.learned.Has(p) && (!family || x.learned.IsFamily(p))
	if p.Cmd == "" || known || x.locking.Has(p, now) || family && !procs.SingleThreaded(pid) {
		return
	}
	if held, known := procs.HoldsLock(pid); held {
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
	if c := x.classes.Get(p, procs.RequestFeatures(pid)); c != nil {
		c.Wrote() // the learning request's class writes
	}
	log := x.cfg.Log
	log.Info("rmw: learned a read-modify-write without a lock: its opens of this file take sessions",
		zap.String("path", loglimit.Path(p.Path)), zap.String("program", p.Cmd), zap.Uint32("uid", uid), zap.Uint32("pid", pid),
		zap.Bool("family", family))
	if x.learned.Full(uid) {
		log.Warn("rmw: no more pairs are learned for this user (its share, or all users' but root's, is full)",
			zap.Uint32("uid", uid), zap.Int("per_uid", rmw.MaxPerUID), zap.Int("all_users", rmw.MaxLearned))
	}
	x.save()
}

// Renamed: file to was renamed over file from (now at path) by thread
// tid of user uid, under Names' lock. A session on from moves to to,
// with its waiters; when tid holds it (or is family of its holder) the
// rename is its write: the session ends, as at a commit. Otherwise, in
// auto mode, a rename by a thread that read from, or whose process's
// child did, or whose sibling read from and wrote to, is learned from.
// Both by after, called without the lock (they may read /proc).
func (x *State) Renamed(tid, uid uint32, from, to uint64, path string) (after func()) {
	x.written.Add(to, time.Now())
	s := x.Table(uid).Move(from, to)
	x.moves.Add(from, to, path)
	return func() {
		if s != nil && x.Owns(s, tid) {
			s.EndWritten()
		} else if x.cfg.Auto {
			x.learnRename(from, to, path, tid, uid)
		}
	}
}

// learnRename learns from a rename of file to over file from (at path)
// by thread tid of user uid: a read of from by the same thread, by a
// child of its process, or by a sibling process when that sibling or
// their parent wrote to (the parent's temporary file).
func (x *State) learnRename(from, to uint64, path string, tid, uid uint32) {
	procs := x.cfg.Procs
	pid := procs.Tgid(tid)
	if pid == 0 {
		return
	}
	if x.reads.Read(from, int32(tid)) {
		x.Learn(path, pid, uid, false)
		return
	}
	if x.reads.ChildRead(from, int32(pid)) != 0 {
		x.Learn(path, pid, uid, true)
		return
	}
	pp := procs.Parent(tid)
	if pp <= 1 {
		return
	}
	if a := x.reads.ChildRead(from, int32(pp)); a != 0 && (x.writes.Read(to, a) || x.writes.Read(to, int32(pp))) {
		x.Learn(path, pp, uid, true)
	}
}
