package backing

import (
	"context"
	"fmt"
	"syscall"
	"time"
)

// Leases (fcntl F_SETLEASE) on backing files. Any user may take one on a
// file it owns, directly in BACKING. A blocking open that conflicts with
// it (any open with a write lease, one for writing with a read lease)
// waits in the kernel until the holder gives the lease up or
// /proc/sys/fs/lease-break-time (45 s by default) has passed, in an OS
// thread that Go never gets back: www-data made root's cat wait 45 s, and
// 3,100 such opens cost the daemon 1,500 threads. So backing files are
// opened O_NONBLOCK (ReopenFd): such an open fails at once with
// EWOULDBLOCK (ErrLeased), and has started the break, so the holder has
// been told. Where a request may wait, it tries again (LeaseWaiter).

// ErrLeased: another process holds a lease on the file that the open
// conflicts with. It is EAGAIN for the caller.
var ErrLeased = fmt.Errorf("another process holds a lease on the file: %w", syscall.EAGAIN)

// LeaseWait bounds how long an open through the mount waits for another
// process's lease: a holder that gives it back when told (as Samba or an
// NFS server does) is waited for; one that does not cannot make the
// caller wait the kernel's lease-break-time.
const LeaseWait = 500 * time.Millisecond

// LeaseWaiter paces the tries of one request: a few milliseconds between
// the first ones, longer later, LeaseWait in all.
type LeaseWaiter struct {
	Limit time.Duration // LeaseWait unless set
	until time.Time
	step  time.Duration
}

// Again waits before the next try, with no lock held, and reports whether
// there is to be one: false once the wait is over or ctx ended.
func (w *LeaseWaiter) Again(ctx context.Context) bool {
	now := time.Now()
	if w.until.IsZero() {
		if w.Limit == 0 {
			w.Limit = LeaseWait
		}
		w.until, w.step = now.Add(w.Limit), 2*time.Millisecond
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
