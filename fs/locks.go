package fs

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/fuseprocs"
	"github.com/safefs/safefs/internal/lockbook"
	"github.com/safefs/safefs/internal/proc"
	"github.com/safefs/safefs/lockmgr"
	"github.com/safefs/safefs/scriptlock"
)

// With Options.ScriptLocks set, flock and fcntl lock requests come to the
// daemon (EnableLocks) and are decided by that table: in a cluster keyed
// by the file's path below the mount root, so that daemons on several
// hosts exclude each other; else (locks=daemon) by the logical file.
// Without it they are never sent: the kernel locks.
var (
	_ gofs.NodeGetlker  = (*Node)(nil)
	_ gofs.NodeSetlker  = (*Node)(nil)
	_ gofs.NodeSetlkwer = (*Node)(nil)
)

// lockPath is the key of a file with no lock held yet: its path, or for
// a file without a name one of its own (no other host can reach it).
// In the daemon's own table (locks=daemon) it is the logical file, as
// the kernel's locks are per inode: hard links share it, and a rename
// moves nothing.
func (n *Node) lockPath() string {
	if _, local := n.r.opts.ScriptLocks.(*scriptlock.Memory); local {
		return "file/" + strconv.FormatUint(n.f.ino, 10)
	}
	if n.isRoot() {
		return "."
	}
	if nm, ok := n.f.anyName(); ok {
		return nm.rel()
	}
	return InternalDir + "/unlinked/" + strconv.FormatUint(n.f.ino, 10)
}

func (n *Node) lockRequest(key string, o lockbook.Owner, lk *fuse.FileLock) scriptlock.Request {
	return scriptlock.Request{Key: key, Owner: o.ID, Flock: o.Flock, Pid: lk.Pid,
		Range: scriptlock.Range{Start: lk.Start, End: lk.End, Type: lk.Typ}}
}

// ownerOf is the owner of a request: the kernel's for fcntl locks, the
// handle for flock (see lockbook.Book.FlockID); ok false: a flock unlock of a
// handle that holds none.
func (n *Node) ownerOf(fh gofs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32) (lockbook.Owner, bool) {
	o := lockbook.Owner{ID: owner, Flock: flags&fuse.LK_FLOCK != 0}
	h, ok := fh.(*handle)
	if !o.Flock || !ok {
		return o, true
	}
	o.ID = n.r.book.FlockID(h, lk.Typ != unix.F_UNLCK)
	if flags&releasing != 0 {
		defer n.r.book.DropFlock(h)
	}
	return o, o.ID != 0
}

func (n *Node) Getlk(ctx context.Context, fh gofs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	sl := n.r.opts.ScriptLocks
	if sl == nil {
		return syscall.ENOTSUP
	}
	o, _ := n.ownerOf(fh, owner, lk, flags)
	fl := n.r.book.Begin(n.f, n.lockPath())
	defer n.r.book.Done(n.f, fl)
	h, ok, err := sl.Get(ctx, n.lockRequest(fl.Key, o, lk))
	if err != nil {
		return n.lockErrno(err)
	}
	if !ok {
		*out = *lk
		out.Typ = unix.F_UNLCK
		return 0
	}
	*out = fuse.FileLock{Start: h.Start, End: h.End, Typ: h.Type, Pid: h.Pid}
	return 0
}

func (n *Node) Setlk(ctx context.Context, fh gofs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return n.setlk(ctx, fh, owner, lk, flags, false)
}

func (n *Node) Setlkw(ctx context.Context, fh gofs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return n.setlk(ctx, fh, owner, lk, flags, true)
}

func (n *Node) setlk(ctx context.Context, fh gofs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32, wait bool) syscall.Errno {
	sl := n.r.opts.ScriptLocks
	if sl == nil {
		return syscall.ENOTSUP
	}
	if flags&releasing != 0 && flags&fuse.LK_FLOCK == 0 {
		return n.releaseOFD(fh)
	}
	if flags&(releasing|fuse.LK_FLOCK) == releasing|fuse.LK_FLOCK {
		n.r.crash("flock-released") // a stop point for tests only: its owner still numbered
	}
	o, ok := n.ownerOf(fh, owner, lk, flags)
	caller := callerTid(ctx) // before ctx is replaced below
	if lk.Typ != unix.F_UNLCK {
		n.f.lockedOnce.Store(true) // before the grant: see noFlush
		if !o.Flock {
			n.rawLock(fh, lk) // SQLite's lock bytes (rawfile.go)
		}
	}
	if lk.Typ == unix.F_UNLCK {
		if !ok || !n.r.book.Holds(n.f, o) {
			return 0 // the unlock of every close, by an owner holding nothing
		}
		// An unlock is never given up half way for an interrupt.
		ctx = context.Background()
		if flags&releasing != 0 {
			n.r.crash("flock-release") // a stop point for tests only
		}
	}
	fl := n.r.book.Begin(n.f, n.lockPath())
	before := n.r.book.Holds(n.f, o)
	var published error
	if before && lk.Typ != unix.F_WRLCK {
		// A release or a downgrade lets others in: what the holder
		// wrote must be in place first, as on a local file system.
		published = n.r.publishBeforeUnlock(caller, fh)
	}
	// Read before the request: a lease changed meanwhile is then seen as
	// lost (refused at commit), never the other way round.
	who := lockbook.Holder{Pid: lk.Pid, Lease: leaseOf(sl)}
	req := n.lockRequest(fl.Key, o, lk)
	held, err := sl.Set(ctx, req, wait)
	if !wait && o.Flock && errors.Is(err, scriptlock.ErrConflict) && n.r.book.ClosedHolders(n.f, o) {
		held, err = awaitRelease(ctx, sl, req) // locks_closed.go
	}
	if errors.Is(err, scriptlock.ErrUnavailable) {
		held = before // unknown: an unlock at close tries again
	}
	n.r.book.End(n.f, fl, o, who, held)
	n.noteFcntl(fh, o, held)
	if held && err == nil && lk.Typ != unix.F_UNLCK {
		n.r.afterGrant(caller, fh) // unlock.go
	}
	n.r.log.Debug("script lock", zap.String("key", fl.Key), zap.Uint64("owner", o.ID), zap.Bool("flock", o.Flock),
		zap.Uint32("type", lk.Typ), zap.Uint32("pid", lk.Pid), zap.Bool("wait", wait), zap.Bool("held", held), zap.Error(err))
	if err != nil {
		return n.lockErrno(err)
	}
	if published != nil {
		// Released all the same: the pending bytes are in rejected/.
		return n.errno(published)
	}
	return 0
}

// scriptLocksLive refuses (ErrFenced: ESTALE, bytes kept in rejected/)
// the commit of a process, opener or closer, that holds a script lock
// tied to a lease other than the one the commit's lock was fenced with:
// its lock ended with that lease (this host paused or cut off past the
// TTL), another host may have taken it and committed meanwhile, and
// what this process writes was decided under a lock it no longer has.
func (h *handle) scriptLocksLive(lease int64) error {
	if h.n.r.opts.ScriptLocks == nil || lease == 0 {
		return nil // commit locks without a lease (not clustered): nothing to compare
	}
	for _, pid := range []uint32{h.tgid, proc.Tgid(h.closer)} {
		if pid != 0 && h.n.r.book.LostBy(pid, lease) {
			return fmt.Errorf("%w: process %d holds a script lock that ended with an earlier lease", lockmgr.ErrFenced, pid)
		}
	}
	return nil
}

// leaseOf is the lease a lock table ties locks to now (0: none).
func leaseOf(sl scriptlock.Locker) int64 {
	if l, ok := sl.(interface{ Lease() int64 }); ok {
		return l.Lease()
	}
	return 0
}

// lockErrno: EAGAIN for a conflict, EINTR for an interrupted wait,
// ENOLCK when the table cannot be reached (never a local decision).
func (n *Node) lockErrno(err error) syscall.Errno {
	switch {
	case errors.Is(err, scriptlock.ErrConflict):
		return syscall.EAGAIN
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return syscall.EINTR
	}
	n.r.log.Warn("script lock request failed: ENOLCK", zap.String("path", logPath(n.path())), zap.Error(err))
	return syscall.ENOLCK
}

// releaseFlockUnlock is FUSE_RELEASE_FLOCK_UNLOCK: the released file
// took flock locks. releasing marks the unlock sent for it.
const (
	releaseFlockUnlock = 1 << 1
	releasing          = 1 << 31
)

// unlockOwner sends the bridge the unlock the kernel leaves to the file
// system: an owner's fcntl locks at each close (FLUSH), an open file's
// flock lock at its release.
func (w rawFS) unlockOwner(cancel <-chan struct{}, h *fuse.InHeader, fh, owner uint64, flags uint32) {
	in := &fuse.LkIn{InHeader: *h, Fh: fh, Owner: owner, LkFlags: flags,
		Lk: fuse.FileLock{End: scriptlock.MaxEnd, Typ: unix.F_UNLCK}}
	w.RawFileSystem.SetLk(cancel, in)
}

func (w rawFS) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	fuseprocs.YieldNowAndThen()
	st := w.RawFileSystem.Flush(cancel, in) // the commit, under the script's lock
	if w.locks {
		w.unlockOwner(cancel, &in.InHeader, in.Fh, in.LockOwner, 0)
	}
	return st
}

func (w rawFS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	fuseprocs.YieldNowAndThen()
	if w.locks {
		w.unlockOwner(cancel, &in.InHeader, in.Fh, 0, releasing) // OFD locks (locks_ofd.go)
	}
	if w.locks && in.ReleaseFlags&releaseFlockUnlock != 0 {
		w.unlockOwner(cancel, &in.InHeader, in.Fh, in.LockOwner, fuse.LK_FLOCK|releasing)
		// The waiter the unlock woke is queued on this processor, and
		// the release's closes below may sit in the kernel (the last
		// close of a replaced version frees it) until the runtime
		// takes the processor back: let the waiter's reply go first.
		runtime.Gosched()
	}
	w.RawFileSystem.Release(cancel, in)
}
