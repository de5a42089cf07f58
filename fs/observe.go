package fs

import (
	"time"

	"github.com/safefs/safefs/internal/proc"
	"github.com/safefs/safefs/internal/report"
	"github.com/safefs/safefs/journal"
	"github.com/safefs/safefs/lockmgr"
)

// Observer is told of commits, rejections and recovery as they happen;
// the events and their kinds and reasons are package report's.
type (
	Observer    = report.Observer
	CommitEvent = report.CommitEvent
	RejectEvent = report.RejectEvent
)

// Commit kinds (CommitEvent.Kind).
const (
	KindReplace = report.KindReplace
	KindAppend  = report.KindAppend
	KindInPlace = report.KindInPlace
)

// Reasons of a rejection (RejectEvent.Reason).
const (
	ReasonLockTimeout = report.ReasonLockTimeout
	ReasonQueueFull   = report.ReasonQueueFull
	ReasonStale       = report.ReasonStale
	ReasonEIO         = report.ReasonEIO
	ReasonENOSPC      = report.ReasonENOSPC
	ReasonKilled      = report.ReasonKilled
	ReasonOther       = report.ReasonOther
	ReasonFenced      = report.ReasonFenced
	ReasonCluster     = report.ReasonCluster
)

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
		e := &RejectEvent{Reason: report.Reason(why), Err: why, KeptAs: keptAs}
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

// cmdlineOf returns a reader of pid's command line (proc.Cmdline).
func cmdlineOf(pid uint32) func() string {
	return func() string { return proc.Cmdline(pid) }
}

// Gauges are levels of a mount, read when asked (package report).
type Gauges = report.Gauges

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
