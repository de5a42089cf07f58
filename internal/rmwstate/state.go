// Package rmwstate is one mount's read-modify-write state over package
// rmw: the users' session tables, what selects an open for a session
// (globs, learned pairs and their families), what learning watches
// (reads, writes, renames) and the file the learned pairs are kept in.
// fs calls it from its FUSE requests with plain values (file numbers,
// paths, thread ids); processes are looked up through Procs, so the
// rules are tested on given process trees. docs/sessions.md explains
// them.
package rmwstate

import (
	"maps"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/safefs/safefs/internal/exitwatch"
	"github.com/safefs/safefs/internal/loglimit"
	"github.com/safefs/safefs/internal/recent"
	"github.com/safefs/safefs/rmw"
)

// Config is what New needs.
type Config struct {
	Hold, Wait time.Duration // rmw_hold, rmw_wait
	Globs      rmw.Globs
	Auto       bool // rmw=auto: learn pairs, kept in Dir
	Dir        int  // the internal directory (store.go)
	Procs      Procs
	Log        *zap.Logger
	// LockHeld reports whether pid holds a script lock through the
	// daemon: known without /proc.
	LockHeld func(pid uint32) bool
	Exits    *exitwatch.Watch // ends sessions at their holder's exit
}

// State is a mount's session tables and selection.
type State struct {
	cfg     Config
	tablesM sync.Mutex
	tables  map[uint32]*rmw.Table // by uid
	learned *rmw.Learned
	classes *rmw.Classes // of the learned pairs' requests
	reads   *rmw.Reads
	writes  *rmw.Reads // who opened which file for writing (learn.go)
	moves   *rmw.Moves // renames over files (learn.go)
	// Names orders a rename's change of names and its move of a
	// session against an open's check of which file is at its path.
	Names sync.RWMutex
	// written: files opened for writing or renamed over lately: only
	// their readers' parents are read (learn.go).
	written recent.Set[uint64]
	saveMu  sync.Mutex
	warnLog loglimit.Limit
	// locking: the (file, program) pairs seen holding a lock when they
	// rewrote what they read, not checked again for a while: a flock
	// counter would otherwise have every process's descriptors read in
	// /proc at every commit (about 85 system calls each, measured).
	locking recent.Set[rmw.Pair]
}

// lockingKeep is how long a pair seen locking is not checked again; a
// program that drops its lock meanwhile is learned that much later.
const lockingKeep = 10 * time.Second

// maxLockingPairs bounds the memory: past it the set starts afresh.
const maxLockingPairs = 4096

// readKeep is how long a read is remembered as the first half of a
// read-modify-write: a CGI script rewrites within milliseconds.
const readKeep = 30 * time.Second

// writtenKeep is how long a file opened for writing stays one whose
// readers' parents are read; maxWritten bounds that set.
const (
	writtenKeep = 10 * time.Minute
	maxWritten  = 4096
)

// New makes a mount's state; in auto mode it loads what was learned.
func New(c Config) *State {
	x := &State{cfg: c, tables: map[uint32]*rmw.Table{}, learned: rmw.NewLearned(), classes: rmw.NewClasses(),
		reads: rmw.NewReads(readKeep), writes: rmw.NewReads(readKeep), moves: rmw.NewMoves(readKeep),
		locking: recent.Set[rmw.Pair]{Keep: lockingKeep, Max: maxLockingPairs},
		written: recent.Set[uint64]{Keep: writtenKeep, Max: maxWritten}}
	if c.Auto {
		x.learned = Load(c.Dir, c.Log)
	}
	x.classes.OnJudged(func(cl *rmw.Class) {
		c.Log.Info("rmw: a request class is judged read-only: its read-only opens take no session",
			zap.String("path", loglimit.Path(cl.Pair.Path)), zap.String("program", cl.Pair.Cmd), zap.Uint32("uid", cl.Pair.UID),
			zap.String("class", cl.Features), zap.Int("sessions_without_a_write", rmw.ReadOnlyAfter))
	})
	c.Log.Info("rmw sessions on", zap.Bool("auto", c.Auto), zap.Strings("globs", c.Globs),
		zap.Duration("rmw_hold", c.Hold), zap.Duration("rmw_wait", c.Wait), zap.Int("learned", x.learned.Len()))
	return x
}

// Stop stops watching holders' exits.
func (x *State) Stop() { x.cfg.Exits.Stop() }

// Auto reports whether pairs are learned.
func (x *State) Auto() bool { return x.cfg.Auto }

// Table is the session table of user uid.
func (x *State) Table(uid uint32) *rmw.Table {
	x.tablesM.Lock()
	defer x.tablesM.Unlock()
	t := x.tables[uid]
	if t == nil {
		t = rmw.New(x.cfg.Hold)
		x.tables[uid] = t
	}
	return t
}

// AllTables are the users' session tables.
func (x *State) AllTables() map[uint32]*rmw.Table {
	x.tablesM.Lock()
	defer x.tablesM.Unlock()
	return maps.Clone(x.tables)
}

// Classes lists the request classes of the learned pairs.
func (x *State) Classes() []rmw.ClassInfo { return x.classes.List() }

// Watch ends s at its holder's exit.
func (x *State) Watch(s *rmw.Session) { x.cfg.Exits.Add(s.Holder, s) }

// Resolve is the file a rename put in the place of file key, and its
// path ("" if none).
func (x *State) Resolve(key uint64) (uint64, string) { return x.moves.Resolve(key) }

// Forget drops what is remembered of file key: its number may name
// another file next, whose first write must not look like a
// read-modify-write.
func (x *State) Forget(key uint64) {
	x.reads.Forget(key)
	x.moves.Forget(key)
}

// Snapshots are the sessions of every user's table, by uid (status).
func (x *State) Snapshots() map[uint32][]rmw.SessionInfo {
	out := map[uint32][]rmw.SessionInfo{}
	for uid, t := range x.AllTables() {
		out[uid] = t.Snapshot()
	}
	return out
}
