package fs

import (
	"context"
	"errors"
	"time"

	"github.com/safefs/safefs/scriptlock"
)

// A flock lock ends with its open file's RELEASE, which the kernel sends
// in the background after the last close() returned; on a local file
// system it ends within that close(). So a LOCK_NB attempt right after
// another process's close failed through the daemon's locks where a
// plain directory grants it. A non-blocking flock that conflicts only
// with handles closed since their last use waits for their RELEASE, up
// to closedLockWait; if one lives on (a dup'd or inherited descriptor),
// it fails after that wait as it would have at once.
const closedLockWait = 200 * time.Millisecond

// ClosedSinceUse reports whether h was closed since its last use
// (flushed), or its close is not told to the daemon (noFlush): its flock
// lock, if no other handle holds it, ends with its RELEASE
// (lockbook.Handle).
func (h *handle) ClosedSinceUse() bool { return h.flushed.Load() || h.noFlush.Load() }

// awaitRelease is a non-blocking flock request r retried as a wait of at
// most closedLockWait; a wait that ends without the lock (its time up,
// or the request interrupted) is a conflict.
func awaitRelease(ctx context.Context, sl scriptlock.Locker, r scriptlock.Request) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, closedLockWait)
	defer cancel()
	held, err := sl.Set(ctx, r, true)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		err = scriptlock.ErrConflict
	}
	return held, err
}
