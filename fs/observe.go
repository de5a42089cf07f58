package fs

import (
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/safefs/safefs/internal/proc"
	"github.com/safefs/safefs/journal"
	"github.com/safefs/safefs/lockmgr"
)

// Observer is told of commits, rejections and recovery as they happen
// (Options.Observer; nil: none). Its methods are called in the request
// path, after the file's lock is released: they must return at once and
// never wait for I/O of their own (queue it, or drop and count it).
type Observer interface {
	Committed(CommitEvent)
	Rejected(RejectEvent)
	// Recovered is called at mount with what recovery did.
	Recovered(journal.Summary)
}

// Commit kinds (CommitEvent.Kind).
const (
	KindReplace = "replace"
	KindAppend  = "append"
	KindInPlace = "inplace"
)

// Reasons of a rejection (RejectEvent.Reason).
const (
	ReasonLockTimeout = "lock_timeout"
	ReasonQueueFull   = "queue_full"
	ReasonStale       = "stale"
	ReasonEIO         = "eio"
	ReasonENOSPC      = "enospc"
	ReasonKilled      = "killed" // the writer was killed by a signal: not committed
	ReasonOther       = "other"
	ReasonFenced      = "fenced"  // cluster: the lease was lost before publishing
	ReasonCluster     = "cluster" // cluster: etcd could not be reached
)

// CommitEvent describes one commit.
type CommitEvent struct {
	Time     time.Time     // when the commit began (the close or fsync)
	Path     string        // below the mount
	Kind     string        // KindReplace, KindAppend, KindInPlace
	Bytes    int64         // size of the new version; for an append, the bytes appended
	PID      uint32        // the closing thread (else the opener's process); 0 if unknown
	UID      uint32        // the opener
	LockWait time.Duration // waiting for the file's commit lock
	Duration time.Duration // the whole commit, lock wait included
	// Cmdline reads the writer's command line from /proc (bounded).
	// Call it in the Observer method, if at all: the process may be
	// gone later.
	Cmdline func() string
}

// RejectEvent describes a commit that was not made.
type RejectEvent struct {
	CommitEvent
	Reason string // Reason* constants
	Err    error  // nil for ReasonKilled
	// KeptAs is the name of the bytes in rejected/; "" if they were
	// dropped (rejected/ full) or not kept (a killed writer's).
	KeptAs string
}

// commitObs is what a commit in progress records for its event. It lives
// on the handle (h.mu held) only while an Observer is set.
type commitObs struct {
	ev       CommitEvent
	rejected *RejectEvent
	killed   bool
}

// obsStart begins a commit's event; nothing without an Observer.
func (h *handle) obsStart() {
	if h.n.r.opts.Observer == nil {
		return
	}
	o := &commitObs{ev: CommitEvent{Time: time.Now(), Kind: KindReplace, UID: h.uid, PID: h.closer}}
	if h.p.appends() {
		o.ev.Kind = KindAppend
	}
	if o.ev.PID == 0 {
		o.ev.PID = h.tgid
	}
	o.ev.Bytes = h.pendingSeen.Load() // noted by commit just before
	h.obs = o
}

func (h *handle) obsLocked() {
	if h.obs != nil {
		h.obs.ev.LockWait = time.Since(h.obs.ev.Time)
	}
}

func (h *handle) obsKind(kind string) {
	if h.obs != nil {
		h.obs.ev.Kind = kind
	}
}

// obsRejected records why the commit was not made and where its bytes went.
func (h *handle) obsRejected(why error, keptAs string) {
	if h.obs != nil {
		e := &RejectEvent{Reason: rejectReason(why), Err: why, KeptAs: keptAs}
		if e.Reason == ReasonLockTimeout {
			e.Err = lockmgr.ErrTimeout // not the context's "deadline exceeded"
		}
		h.obs.rejected = e
	}
}

// obsEnd tells the Observer how the commit ended.
func (h *handle) obsEnd() {
	o := h.obs
	if o == nil {
		return
	}
	h.obs = nil
	o.ev.Path = h.n.path()
	o.ev.Duration = time.Since(o.ev.Time)
	o.ev.Cmdline = cmdlineOf(o.ev.PID)
	obs := h.n.r.opts.Observer
	switch {
	case o.killed:
		obs.Rejected(RejectEvent{CommitEvent: o.ev, Reason: ReasonKilled})
	case o.rejected != nil:
		o.rejected.CommitEvent = o.ev
		obs.Rejected(*o.rejected)
	default:
		obs.Committed(o.ev)
	}
}

// obsKilled reports the close of a killed writer; within a commit, at
// its end.
func (h *handle) obsKilled(pid uint32) {
	if h.obs != nil {
		h.obs.killed = true
		return
	}
	obs := h.n.r.opts.Observer
	if obs == nil {
		return
	}
	ev := CommitEvent{Time: time.Now(), Path: h.n.path(), Kind: KindReplace, UID: h.uid, PID: pid}
	if h.p.appends() {
		ev.Kind = KindAppend
	}
	if ev.PID == 0 {
		ev.PID = h.tgid
	}
	ev.Cmdline = cmdlineOf(ev.PID)
	obs.Rejected(RejectEvent{CommitEvent: ev, Reason: ReasonKilled})
}

func (r *root) obsRecovered(s journal.Summary) {
	if r.opts.Observer != nil {
		r.opts.Observer.Recovered(s)
	}
}

func rejectReason(err error) string {
	switch {
	case errors.Is(err, lockmgr.ErrTooManyWaiters):
		return ReasonQueueFull
	case errors.Is(err, lockmgr.ErrFenced):
		return ReasonFenced
	case errors.Is(err, lockmgr.ErrUnavailable):
		return ReasonCluster
	case errors.Is(err, lockmgr.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return ReasonLockTimeout
	case errors.Is(err, syscall.ESTALE):
		return ReasonStale
	case errors.Is(err, syscall.EIO):
		return ReasonEIO
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return ReasonENOSPC
	}
	return ReasonOther
}

// cmdlineOf returns a reader of pid's command line (proc.Cmdline).
func cmdlineOf(pid uint32) func() string {
	return func() string { return proc.Cmdline(pid) }
}

// Gauges are levels of a mount, read when asked (a scrape).
type Gauges struct {
	OpenHandles int // files open through the mount
	// KnownFiles: logical files in the daemon's tables (the kernel has a
	// node of each, or an open is on its way to one): falls back when
	// the kernel forgets, so steady growth is a leak.
	KnownFiles   int
	PendingBytes int64 // bytes of pending versions (staging files of open handles)
	// RejectedFiles and RejectedBytes are what rejected/ holds as counted
	// against rejected_max: since the mount, files the operator removes
	// meanwhile are counted until the next mount. Bytes are disk use.
	RejectedFiles int64
	RejectedBytes int64
	// RMWHeld: read-modify-write sessions held; RMWWaiting: opens
	// waiting for one.
	RMWHeld, RMWWaiting int
}

// Gauges reads the mount's levels. It never waits for a request: a handle
// busy in one (a commit waiting for its lock) counts with the pending
// size seen at the last look.
func (s *Server) Gauges() Gauges {
	r := s.r
	var g Gauges
	files := r.ids.all()
	g.KnownFiles = len(files)
	for _, f := range files {
		for _, h := range f.handleList() {
			g.OpenHandles++
			g.PendingBytes += h.pendingBytes()
		}
	}
	g.RejectedFiles, g.RejectedBytes = r.kept.Totals()
	if x := r.rmw; x != nil {
		for _, t := range x.AllTables() {
			g.RMWHeld += t.Len()
			g.RMWWaiting += t.Waiters()
		}
	}
	return g
}

// notePending records the pending size before a commit that may wait
// with h.mu held: Gauges and Status report it meanwhile.
func (h *handle) notePending() {
	n, err := h.p.size()
	if err != nil {
		n = int64(len(h.p.buf))
	}
	h.pendingSeen.Store(n)
}

func (h *handle) pendingBytes() int64 {
	if !h.mu.TryLock() {
		return h.pendingSeen.Load()
	}
	defer h.mu.Unlock()
	h.notePending()
	return h.pendingSeen.Load()
}
