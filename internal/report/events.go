package report

import (
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/safefs/safefs/journal"
	"github.com/safefs/safefs/lockmgr"
)

// Observer is told of commits, rejections and recovery as they happen
// (fs.Options.Observer; nil: none). Its methods are called in the request
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

// Reason is the RejectEvent.Reason of a commit that failed with err.
func Reason(err error) string {
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
