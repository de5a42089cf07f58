// Package lockmgr is an in-process, per-key exclusive lock manager.
//
// safefs promises that commits to one file are totally ordered: two commits
// of the same file never interleave, and a later commit always observes the
// earlier one. Keys are logical files (for example inode numbers), not
// paths or byte ranges, so a commit locks the files it touches, does its
// work, and releases them. Waiters are served FIFO per key so a busy file
// cannot starve anyone, multi-key locks are taken in ascending key order so
// they cannot deadlock, and each grant carries a monotonic token that lower
// layers can use as a fencing token after an operator breaks a stuck lock.
//
// The package has no FUSE dependency; it only knows about uint64 keys.
package lockmgr

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

var (
	// ErrTimeout means the wait exceeded Options.Timeout.
	ErrTimeout = errors.New("lock wait timed out")
	// ErrTooManyWaiters means the queue of one of the keys is full.
	ErrTooManyWaiters = errors.New("too many waiters for this lock")
	// ErrLost means the grant was released or one of its keys was broken.
	ErrLost = errors.New("lock grant lost")
	// ErrUnavailable: a shared backend (etcd) could not be reached in
	// time. Commits fail with ENOLCK rather than fall back to local locks.
	ErrUnavailable = errors.New("cluster: etcd unreachable")
	// ErrFenced: a shared backend's lease expired (or has too little
	// time left) before a commit published: it must not publish (ESTALE).
	ErrFenced = errors.New("cluster: lease lost before publishing")
)

// errWaitDone is internal: the wait context ended. Lock maps it to
// ErrTimeout or the caller's ctx.Err().
var errWaitDone = errors.New("lockmgr: wait done")

// Options configures a Manager.
type Options struct {
	Timeout    time.Duration // max wait per Lock call; 0 = wait only for ctx
	MaxWaiters int           // max queued waiters per key (not counting the holder); 0 = unbounded
}

// Manager hands out exclusive locks on uint64 keys.
// The zero value is not usable; call New.
type Manager struct {
	opts Options

	mu   sync.Mutex
	keys map[uint64]*keyState // only keys that are held; idle keys are deleted
	seq  atomic.Uint64        // last token handed out; 0 is never a token
}

// keyState exists only while the key is held, so holder is never 0.
type keyState struct {
	holder uint64    // token (or in-progress Lock id) that owns the key
	tag    any       // the holder's Lock tag, for Snapshot
	since  time.Time // when the holder got the key
	queue  []*waiter // FIFO
}

// waiter is one Lock call queued on one key. ch is closed, under mu, when
// the key is handed to it; from then on it is no longer in the queue.
type waiter struct {
	id    uint64
	ch    chan struct{}
	tag   any
	since time.Time
}

// New returns a Manager with the given options.
func New(o Options) *Manager {
	return &Manager{opts: o, keys: make(map[uint64]*keyState)}
}

// Lock locks all keys (deduplicated, acquired in ascending order so two
// multi-key callers cannot deadlock). It waits FIFO per key until every key
// is held, ctx is done (ctx.Err()), Options.Timeout passes for the call as a
// whole (ErrTimeout), or a key's queue is full (ErrTooManyWaiters, at once).
// It returns ErrLost if a key was broken while the call was still waiting
// for later keys. On any error nothing stays held or queued.
func (m *Manager) Lock(ctx context.Context, keys ...uint64) (*Grant, error) {
	return m.LockTagged(ctx, nil, keys...)
}

// LockTagged is Lock with a tag that Snapshot reports for the caller
// while it waits and while it holds, so a status can say who it is.
func (m *Manager) LockTagged(ctx context.Context, tag any, keys ...uint64) (*Grant, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ks := sortedUnique(keys)
	if g := m.tryAll(ks, tag); g != nil {
		return g, nil
	}
	w := m.newWait(ctx)
	defer w.stop()
	id := m.nextToken()
	for i, k := range ks {
		if err := m.acquire(w, k, id, tag); err != nil {
			m.mu.Lock()
			m.releaseLocked(ks[:i], id)
			m.mu.Unlock()
			return nil, w.mapErr(err)
		}
	}
	return m.finish(ks, id)
}

// sortedUnique copies keys so the caller's slice is never reordered.
func sortedUnique(keys []uint64) []uint64 {
	ks := slices.Clone(keys)
	slices.Sort(ks)
	return slices.Compact(ks)
}

// tryAll takes every key in one critical section if none is held: the
// common uncontended case, with no id swap and no wait set-up.
func (m *Manager) tryAll(ks []uint64, tag any) *Grant {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range ks {
		if m.keys[k] != nil {
			return nil
		}
	}
	tok := m.nextToken()
	now := time.Now()
	for _, k := range ks {
		m.keys[k] = &keyState{holder: tok, tag: tag, since: now}
	}
	return &Grant{m: m, token: tok, keys: ks}
}

// nextToken is atomic so Lock needs no mutex round trip for its id. Grant
// tokens are still ordered per key: finish takes them under mu.
func (m *Manager) nextToken() uint64 {
	return m.seq.Add(1)
}

// acquire takes key k for the in-progress Lock id, waiting if needed.
func (m *Manager) acquire(w *wait, k, id uint64, tag any) error {
	m.mu.Lock()
	ks := m.keys[k]
	if ks == nil {
		m.keys[k] = &keyState{holder: id, tag: tag, since: time.Now()}
		m.mu.Unlock()
		return nil
	}
	// A free key is taken above even after the deadline, but no new wait
	// starts once it has passed.
	if w.expired() {
		m.mu.Unlock()
		return errWaitDone
	}
	if m.opts.MaxWaiters > 0 && len(ks.queue) >= m.opts.MaxWaiters {
		m.mu.Unlock()
		return ErrTooManyWaiters
	}
	wt := &waiter{id: id, ch: make(chan struct{}), tag: tag, since: time.Now()}
	ks.queue = append(ks.queue, wt)
	m.mu.Unlock()
	return m.await(w, k, wt)
}

// await blocks until wt is granted k or the wait ends. If both happen at
// once, the mutex decides: still queued means we gave up first and leave;
// not queued means the key was already handed to us, so we keep it rather
// than strand it (the caller releases it if the whole Lock fails).
func (m *Manager) await(w *wait, k uint64, wt *waiter) error {
	select {
	case <-wt.ch:
		return nil
	case <-w.done():
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dequeueLocked(k, wt) {
		return errWaitDone
	}
	return nil
}

// dequeueLocked removes wt from k's queue and reports whether it was there.
func (m *Manager) dequeueLocked(k uint64, wt *waiter) bool {
	ks := m.keys[k]
	if ks == nil {
		return false
	}
	i := slices.Index(ks.queue, wt)
	if i < 0 {
		return false
	}
	ks.queue = slices.Delete(ks.queue, i, i+1)
	return true
}

// finish swaps the in-progress id for a fresh token, so tokens grow in
// grant order rather than call order, which is what fencing needs.
func (m *Manager) finish(ks []uint64, id uint64) (*Grant, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range ks {
		if !m.holdsLocked(k, id) {
			m.releaseLocked(ks, id)
			return nil, ErrLost
		}
	}
	tok := m.nextToken()
	for _, k := range ks {
		m.keys[k].holder = tok
	}
	return &Grant{m: m, token: tok, keys: ks}, nil
}

func (m *Manager) holdsLocked(k, tok uint64) bool {
	ks := m.keys[k]
	return ks != nil && ks.holder == tok
}

// releaseLocked frees the keys still held by tok. Keys re-granted to
// someone else (after Break) carry another token and are left alone.
func (m *Manager) releaseLocked(keys []uint64, tok uint64) {
	for _, k := range keys {
		if m.holdsLocked(k, tok) {
			m.handOffLocked(k)
		}
	}
}

// handOffLocked gives held key k to its first waiter, or deletes it.
func (m *Manager) handOffLocked(k uint64) {
	ks := m.keys[k]
	if len(ks.queue) == 0 {
		delete(m.keys, k)
		return
	}
	wt := ks.queue[0]
	ks.queue[0] = nil
	ks.queue = ks.queue[1:]
	ks.holder, ks.tag, ks.since = wt.id, wt.tag, time.Now()
	close(wt.ch)
}

// Break revokes the current holder of key (its Check then returns ErrLost)
// and hands the key to the next waiter. It is meant for operators and
// tests; it returns false if nobody held key.
func (m *Manager) Break(key uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.keys[key] == nil {
		return false
	}
	m.handOffLocked(key)
	return true
}

// Len is the number of keys with a holder or waiters.
func (m *Manager) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.keys)
}

// Waiting is how many callers wait for key, for diagnostics.
func (m *Manager) Waiting(key uint64) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ks := m.keys[key]; ks != nil {
		return len(ks.queue)
	}
	return 0
}

// Grant is a set of keys held together by one successful Lock.
type Grant struct {
	m        *Manager
	token    uint64
	keys     []uint64
	released bool // guarded by m.mu
}

// Token is unique and larger than the token of every earlier grant of the
// Manager, so storage can reject writes from a holder that was broken.
func (g *Grant) Token() uint64 { return g.token }

// Check returns nil while the grant holds all its keys, and ErrLost after
// Release or after Break of one of its keys.
func (g *Grant) Check() error {
	g.m.mu.Lock()
	defer g.m.mu.Unlock()
	if g.released {
		return ErrLost
	}
	for _, k := range g.keys {
		if !g.m.holdsLocked(k, g.token) {
			return ErrLost
		}
	}
	return nil
}

// Release frees the grant's keys. It is idempotent and safe from defer.
func (g *Grant) Release() {
	g.m.mu.Lock()
	defer g.m.mu.Unlock()
	if g.released {
		return
	}
	g.released = true
	g.m.releaseLocked(g.keys, g.token)
}
