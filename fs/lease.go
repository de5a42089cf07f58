package fs

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/safefs/safefs/internal/proc"
)

// Leases (fcntl F_SETLEASE) on backing files. Any user may take one on a
// file it owns, directly in BACKING. A blocking open that conflicts with
// it (any open with a write lease, one for writing with a read lease)
// waits in the kernel until the holder gives the lease up or
// /proc/sys/fs/lease-break-time (45 s by default) has passed, in an OS
// thread that Go never gets back: www-data made root's cat wait 45 s, and
// 3,100 such opens cost the daemon 1,500 threads. So the daemon opens
// backing files O_NONBLOCK (reopenFd): such an open fails at once with
// EWOULDBLOCK, and has started the break, so the holder has been told.
// A request waits for the lease only where it holds no lock (Node.Open),
// for at most leaseWait, then answers EAGAIN; elsewhere it answers
// EAGAIN at once, except a CREATE, which the kernel sends under the
// directory's lock: it answers ESTALE, and the kernel's retry finds the
// file and sends an OPEN without that lock. Recovery, before the mount
// serves, waits as long as the kernel lets a holder keep its lease.

// errLeased: another process holds a lease on the file that the open
// conflicts with. It is EAGAIN for the caller.
var errLeased = fmt.Errorf("another process holds a lease on the file: %w", syscall.EAGAIN)

// leaseWait bounds how long an open through the mount waits for another
// process's lease: a holder that gives it back when told (as Samba or an
// NFS server does) is waited for; one that does not cannot make the
// caller wait the kernel's lease-break-time.
const leaseWait = 500 * time.Millisecond

// leaseWaiter paces the tries of one request: a few milliseconds between
// the first ones, longer later, leaseWait in all.
type leaseWaiter struct {
	until time.Time
	step  time.Duration
	limit time.Duration // leaseWait unless set
}

// again waits before the next try, with no lock held, and reports whether
// there is to be one: false once the wait is over or ctx ended.
func (w *leaseWaiter) again(ctx context.Context) bool {
	now := time.Now()
	if w.until.IsZero() {
		if w.limit == 0 {
			w.limit = leaseWait
		}
		w.until, w.step = now.Add(w.limit), 2*time.Millisecond
	}
	left := w.until.Sub(now)
	if left <= 0 {
		return false
	}
	d := min(w.step, left)
	w.step = min(2*w.step, 100*time.Millisecond)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// leaseRefused logs a request for path refused (EAGAIN) because another
// process kept its lease on backing inode k, with who holds it if
// /proc/locks tells; at most a few lines per interval.
func (r *root) leaseRefused(ctx context.Context, what, path string, k key, err error) {
	if !errors.Is(err, errLeased) {
		return
	}
	ok, skipped := r.leaseLog.allow()
	if !ok {
		return
	}
	r.log.Warn(what+" refused: another process holds a lease on the backing file (EAGAIN)",
		zap.String("path", logPath(path)), zap.Uint32("uid", callerUID(ctx)), zap.Uint32("tid", callerTid(ctx)),
		zap.Any("lease_holders", proc.LeaseHolders(k.dev, k.ino)), zap.Int("not_logged_before", skipped))
}
