package fs

import (
	"context"
	"errors"
	"slices"
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

// closedHolders reports whether f has flock owners other than o, all of
// them handles closed since their last use (flushed), whose close the
// daemon is not told of (noFlush), or being released (no longer
// numbered: dropFlock).
func (b *lockBook) closedHolders(f *file, o lockOwner) bool {
	var ids []uint64
	var hs []*handle
	b.mu.Lock()
	if fl := b.files[f]; fl != nil {
		for w := range fl.owners {
			if w.flock && w.id != o.id {
				ids = append(ids, w.id)
			}
		}
	}
	for h, id := range b.flocks {
		if slices.Contains(ids, id) {
			hs = append(hs, h)
		}
	}
	b.mu.Unlock()
	for _, h := range hs {
		if !h.flushed.Load() && !h.noFlush.Load() {
			return false
		}
	}
	return len(ids) > 0
}

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
