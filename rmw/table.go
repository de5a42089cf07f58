// Package rmw keeps read-modify-write sessions: per-file exclusive
// sessions held by a thread from its first open of the file until its
// first commit, its exit, or a hold time after its last close. Waiters
// are served FIFO; a wait that would close a cycle in the wait-for graph
// is refused at once, and every wait is bounded. Giving up never fails
// the caller: it proceeds without a session, as on a plain directory.
//
// The package has no FUSE dependency: keys are logical files (a
// session moves with its path when a rename replaces its file), holders
// and waiters are thread ids, or a script process's id for its children
// (the caller's Family decides who joins).
package rmw

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"
)

// Outcome says how Enter ended.
type Outcome int

const (
	Took    Outcome = iota // a new session, no wait
	Joined                 // the caller's own session, or its ancestor's
	Granted                // a session after a wait
	Cycle                  // waiting would close a cycle: no session
	GaveUp                 // waited the whole wait: no session
	Stopped                // ctx ended (the request was interrupted): no session
	// Passed: the caller gave up on (or broke a cycle with) this very
	// session before: it goes on without one again, at once, so that a
	// script's later opens of the file do not wait a second time.
	Passed
	// Unneeded: the caller's unneeded channel closed while it waited
	// (its request class was judged read-only): no session.
	Unneeded
)

// Waited reports whether the caller waited in Enter for this outcome.
func (o Outcome) Waited() bool { return o == Granted || o == GaveUp || o == Stopped || o == Unneeded }

// Table holds the sessions of one mount.
type Table struct {
	hold time.Duration // how long a session outlives its last close

	mu    sync.Mutex
	held  map[uint64]*Session
	waits map[int32][]uint64 // process -> keys it waits for
}

// Session is one thread's exclusive session on one key.
type Session struct {
	key    uint64 // guarded by t.mu: Move changes it
	Holder int32
	Since  time.Time // when the holder got it

	t     *Table
	open  int // handles open under the session (guarded by t.mu)
	busy  int // commits of other files by the holder in progress (Busy)
	ended bool
	gen   int // bumped when a hold timer is armed or cancelled
	timer *time.Timer
	queue []*waiter
	// passed: processes that went on without this session (Passed).
	passed map[int32]bool
	onEnd  func() // run once, in a goroutine, when the session ends
	class  *Class // the holder's request class, nil if none
	wrote  bool   // opened for writing or committed under the session
	lease  int64  // the lease of what it holds beyond this table, 0: none
}

// SetLease records the lease that what the session holds beyond this
// table (a cluster lock, OnEnd) is tied to: a commit under the session
// checks it still lives.
func (s *Session) SetLease(lease int64) {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	s.lease = lease
}

// Lease is the lease given to SetLease, 0 if none.
func (s *Session) Lease() int64 {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	return s.lease
}

// SetClass gives the session its holder's request class: a session that
// ends without MarkWrote counts for judging it read-only.
func (s *Session) SetClass(c *Class) {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	s.class = c
}

// MarkWrote records that the file was opened for writing, or
// committed, under the session.
func (s *Session) MarkWrote() {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	s.wrote = true
}

// Class is the session's request class, nil if none.
func (s *Session) Class() *Class {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	return s.class
}

// OnEnd runs f, in a goroutine, once the session ends (at once if it
// has): for what the session holds beyond this table (a cluster lock).
func (s *Session) OnEnd(f func()) {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	if s.ended {
		go f()
		return
	}
	s.onEnd = f
}

type waiter struct {
	key      uint64 // guarded by t.mu: Move changes it
	pid      int32
	since    time.Time
	unneeded <-chan struct{}
	ch       chan struct{} // closed when granted, or let go (out)
	s        *Session      // the session granted
	out      Outcome       // Granted, or Unneeded: let go without one
}

// New returns a table whose sessions end hold after their last close.
func New(hold time.Duration) *Table {
	return &Table{hold: hold, held: map[uint64]*Session{}, waits: map[int32][]uint64{}}
}

// Family reports whether pid is holder or one of its descendants. It
// may be slow (it reads /proc): Enter calls it without the table lock.
type Family func(holder, pid int32) bool

// Enter gives pid a session on key, joining its own (or an ancestor's),
// or waiting up to wait. Every session returned counts one open: the
// caller calls Close once for it. holder is the other process involved
// when the outcome is Cycle or GaveUp.
func (t *Table) Enter(ctx context.Context, key uint64, pid int32, fam Family, wait time.Duration) (s *Session, out Outcome, holder int32) {
	return t.EnterUnless(ctx, key, pid, fam, wait, nil)
}

// EnterUnless is Enter, but a wait also ends, with Unneeded and no
// session, when unneeded is closed (nil: never).
func (t *Table) EnterUnless(ctx context.Context, key uint64, pid int32, fam Family, wait time.Duration, unneeded <-chan struct{}) (s *Session, out Outcome, holder int32) {
	t.mu.Lock()
	for range 4 {
		s = t.held[key]
		if s == nil {
			s = t.takeLocked(key, pid)
			t.mu.Unlock()
			return s, Took, 0
		}
		if s.Holder == pid {
			s.joinLocked()
			t.mu.Unlock()
			return s, Joined, 0
		}
		if s.passed[pid] {
			t.mu.Unlock()
			return nil, Passed, s.Holder
		}
		h := s.Holder
		t.mu.Unlock()
		inFamily := fam != nil && fam(h, pid)
		t.mu.Lock()
		if s2 := t.held[key]; s2 == s && s.Holder == h {
			if inFamily {
				s.joinLocked()
				t.mu.Unlock()
				return s, Joined, 0
			}
			break
		}
		// The session changed hands meanwhile: look again.
	}
	s = t.held[key]
	if s == nil {
		s = t.takeLocked(key, pid)
		t.mu.Unlock()
		return s, Took, 0
	}
	if t.reachesLocked(s.Holder, pid) {
		s.passLocked(pid)
		t.mu.Unlock()
		return nil, Cycle, s.Holder
	}
	select {
	case <-unneeded:
		t.mu.Unlock()
		return nil, Unneeded, s.Holder
	default:
	}
	w := &waiter{key: key, pid: pid, since: time.Now(), unneeded: unneeded, ch: make(chan struct{})}
	s.queue = append(s.queue, w)
	t.waits[pid] = append(t.waits[pid], key)
	t.mu.Unlock()
	return t.await(ctx, w, wait, unneeded)
}

// await blocks until w is granted, the wait passes or ctx ends. If the
// grant and the end come together, the lock decides: still queued means
// we leave; not queued means the session is ours.
func (t *Table) await(ctx context.Context, w *waiter, wait time.Duration, unneeded <-chan struct{}) (*Session, Outcome, int32) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	out := GaveUp
	select {
	case <-w.ch:
		return w.s, w.out, 0
	case <-timer.C:
	case <-ctx.Done():
		out = Stopped
	case <-unneeded:
		out = Unneeded
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.held[w.key]
	if s != nil {
		if i := slices.Index(s.queue, w); i >= 0 {
			s.queue = slices.Delete(s.queue, i, i+1)
			t.unwaitLocked(w.pid, w.key)
			if out != Unneeded {
				s.passLocked(w.pid)
			}
			return nil, out, s.Holder
		}
	}
	return w.s, w.out, 0
}

func (s *Session) passLocked(pid int32) {
	if s.passed == nil {
		s.passed = map[int32]bool{}
	}
	s.passed[pid] = true
}

func (t *Table) takeLocked(key uint64, pid int32) *Session {
	s := &Session{key: key, Holder: pid, Since: time.Now(), t: t, open: 1}
	t.held[key] = s
	return s
}

// joinLocked counts one more open and stops a pending hold timer.
func (s *Session) joinLocked() {
	s.open++
	s.gen++
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
}

// reachesLocked reports whether from waits, directly or through the
// holders it waits for, for a session pid holds.
func (t *Table) reachesLocked(from, pid int32) bool {
	seen := map[int32]bool{}
	stack := []int32{from}
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if p == pid {
			return true
		}
		if seen[p] {
			continue
		}
		seen[p] = true
		for _, k := range t.waits[p] {
			if s := t.held[k]; s != nil {
				stack = append(stack, s.Holder)
			}
		}
	}
	return false
}

func (t *Table) unwaitLocked(pid int32, key uint64) {
	ks := t.waits[pid]
	if i := slices.Index(ks, key); i >= 0 {
		ks = slices.Delete(ks, i, i+1)
	}
	if len(ks) == 0 {
		delete(t.waits, pid)
	} else {
		t.waits[pid] = ks
	}
}

// Rearm restarts the hold of the sessions held by holder with no open
// left: the holder is still at its request (it committed another file,
// a temporary one it will rename over the selected file).
func (t *Table) Rearm(holder int32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.held {
		if s.Holder != holder || s.ended || s.open > 0 || s.busy > 0 || s.timer == nil {
			continue
		}
		s.armHoldLocked()
	}
}

// Busy stops the hold of the sessions holder holds while it commits
// another file, until the returned func is called: that file is a
// temporary one it will rename over the selected file (sed -i), and a
// commit's fsync may outlast the hold on a loaded machine. Then the hold
// starts again for those with no open left. A commit is bounded by
// lock_timeout, so the hold is only postponed.
func (t *Table) Busy(holder int32) (done func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var ss []*Session
	for _, s := range t.held {
		if s.Holder != holder || s.ended {
			continue
		}
		s.busy++
		s.stopHoldLocked()
		ss = append(ss, s)
	}
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		for _, s := range ss {
			s.busy--
			if s.busy == 0 && !s.ended && s.open == 0 {
				s.armHoldLocked()
			}
		}
	}
}

// stopHoldLocked cancels a pending hold timer. t.mu is held.
func (s *Session) stopHoldLocked() {
	s.gen++
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
}

// armHoldLocked (re)starts the hold: s ends after it unless an open
// joins meanwhile. t.mu is held.
func (s *Session) armHoldLocked() {
	s.stopHoldLocked()
	gen := s.gen
	s.timer = time.AfterFunc(s.t.hold, func() { s.endIf(gen) })
}

// Key is the key the session is on now.
func (s *Session) Key() uint64 {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	return s.key
}

// Move moves the session on from, with its waiters, to key to: a rename
// replaced the file at the session's path with another (the session is
// the request's, whose next open will find the new file). Nothing moves
// when to has a session of its own. It returns the session moved, nil
// if none.
func (t *Table) Move(from, to uint64) *Session {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.held[from]
	if s == nil || from == to || t.held[to] != nil {
		return nil
	}
	delete(t.held, from)
	t.held[to] = s
	s.key = to
	for _, w := range s.queue {
		w.key = to
		if ks := t.waits[w.pid]; ks != nil {
			if i := slices.Index(ks, from); i >= 0 {
				ks[i] = to
			}
		}
	}
	return s
}

// Held returns the session on key, nil if none.
func (t *Table) Held(key uint64) *Session {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.held[key]
}

// Len is the number of sessions held.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.held)
}

// Waiting is how many processes wait for key.
func (t *Table) Waiting(key uint64) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.held[key]; s != nil {
		return len(s.queue)
	}
	return 0
}

// SessionInfo is one session as Snapshot sees it.
type SessionInfo struct {
	Key     uint64
	Holder  int32
	Since   time.Time
	Open    int          // opens counted, 0 while only the hold keeps it
	Waiters []WaiterInfo // in the order they will be served
}

// WaiterInfo is one opener waiting for a session.
type WaiterInfo struct {
	ID    int32
	Since time.Time
}

// Snapshot lists the sessions held, by key.
func (t *Table) Snapshot() []SessionInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]SessionInfo, 0, len(t.held))
	for _, s := range t.held {
		h := SessionInfo{Key: s.key, Holder: s.Holder, Since: s.Since, Open: s.open}
		for _, w := range s.queue {
			h.Waiters = append(h.Waiters, WaiterInfo{ID: w.pid, Since: w.since})
		}
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b SessionInfo) int { return cmp.Compare(a.Key, b.Key) })
	return out
}

// Waiters is how many opens wait for a session of the table.
func (t *Table) Waiters() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, s := range t.held {
		n += len(s.queue)
	}
	return n
}

// Close ends one open counted by Enter. After the last, the session
// lasts the hold time, unless an open joins it meanwhile. Close of a
// nil session does nothing.
func (s *Session) Close() {
	if s == nil {
		return
	}
	t := s.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if s.ended || s.open == 0 {
		return
	}
	s.open--
	if s.open > 0 || s.busy > 0 {
		return // Busy's done arms the hold
	}
	s.armHoldLocked()
}

// endIf ends s if no open joined it since the timer of gen was armed.
func (s *Session) endIf(gen int) {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	if s.gen == gen && s.open == 0 {
		s.endLocked()
	}
}

// End ends the session (commit, exit) and hands the key to the first
// waiter. Ending an ended session does nothing.
func (s *Session) End() {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	s.endLocked()
}

// EndWritten ends the session at its holder's write (a commit, a
// rename over the file): its request class is one that writes.
func (s *Session) EndWritten() {
	if c := s.Class(); c != nil {
		c.Wrote()
	}
	s.MarkWrote()
	s.End()
}

// Ended reports whether the session is over.
func (s *Session) Ended() bool {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	return s.ended
}

func (s *Session) endLocked() {
	if s.ended {
		return
	}
	t := s.t
	s.ended = true
	if s.class != nil && !s.wrote {
		s.class.endedReading()
	}
	if s.onEnd != nil {
		go s.onEnd()
		s.onEnd = nil
	}
	s.gen++
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	if t.held[s.key] != s {
		return
	}
	// Waiters no longer in need (their class was judged read-only, by
	// this very end perhaps) are let go, not handed the session.
	for len(s.queue) > 0 && closed(s.queue[0].unneeded) {
		w := s.queue[0]
		s.queue = s.queue[1:]
		t.unwaitLocked(w.pid, s.key)
		w.out = Unneeded
		close(w.ch)
	}
	if len(s.queue) == 0 {
		delete(t.held, s.key)
		return
	}
	w := s.queue[0]
	w.out = Granted
	next := t.takeLocked(s.key, w.pid)
	next.queue = s.queue[1:]
	s.queue = nil
	t.unwaitLocked(w.pid, s.key)
	w.s = next
	close(w.ch)
}

// closed reports whether c is closed (nil never is).
func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
