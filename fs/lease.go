package fs

import (
	"context"
	"errors"

	"go.uber.org/zap"

	"github.com/safefs/safefs/internal/backing"
	"github.com/safefs/safefs/internal/proc"
)

// Leases on backing files (internal/backing, lease.go): an open that
// another process's lease holds back fails at once (backing.ErrLeased).
// A request waits for the lease only where it holds no lock (Node.Open),
// for at most backing.LeaseWait, then answers EAGAIN; elsewhere it
// answers EAGAIN at once, except a CREATE, which the kernel sends under
// the directory's lock: it answers ESTALE, and the kernel's retry finds
// the file and sends an OPEN without that lock. Recovery, before the
// mount serves, waits as long as the kernel lets a holder keep its lease.

// leaseRefused logs a request for path refused (EAGAIN) because another
// process kept its lease on backing inode k, with who holds it if
// /proc/locks tells; at most a few lines per interval.
func (r *root) leaseRefused(ctx context.Context, what, path string, k key, err error) {
	if !errors.Is(err, backing.ErrLeased) {
		return
	}
	ok, skipped := r.leaseLog.Allow()
	if !ok {
		return
	}
	r.log.Warn(what+" refused: another process holds a lease on the backing file (EAGAIN)",
		zap.String("path", logPath(path)), zap.Uint32("uid", callerUID(ctx)), zap.Uint32("tid", callerTid(ctx)),
		zap.Any("lease_holders", proc.LeaseHolders(k.dev, k.ino)), zap.Int("not_logged_before", skipped))
}
