package fs

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/fuseprocs"
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

// lockOwner owns locks: for fcntl locks the kernel's owner (a process's
// files, or the open file for OFD locks); for flock the daemon's number
// of the handle (see lockBook.flocks).
type lockOwner struct {
	id    uint64
	flock bool
}

// fileLocks is what this daemon holds on one logical file.
type fileLocks struct {
	key    string               // the path the first lock was taken at
	owners map[lockOwner]holder // owners holding a range
	busy   int                  // requests in progress
}

// holder is who holds an owner's locks: the process, and the lease the
// lock table tied them to when last granted (0: none).
type holder struct {
	pid   uint32
	lease int64
}

// lockBook is the daemon's own record of who holds script locks: it
// keeps a file's key while any lock is held (a rename then does not
// split the file's locks between two keys), lets the unlock the kernel
// sends at every close skip the table when the owner holds nothing, and
// tells read-modify-write learning which processes lock.
type lockBook struct {
	mu    sync.Mutex
	files map[*file]*fileLocks
	// flock owners are open files, but the kernel's owner number (the
	// struct file's address) is reused as soon as a file is freed, while
	// its RELEASE, which ends its flock lock, is still on the way: the
	// next open file would take over the old lock. So a flock owner is
	// the handle, numbered here until its release.
	flocks map[*handle]uint64
	nextID uint64
	via    ofdOwners // see locks_ofd.go
}

// flockID returns h's flock owner number; add: give it one if it has
// none, else 0.
func (b *lockBook) flockID(h *handle, add bool) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if id, ok := b.flocks[h]; ok || !add {
		return id
	}
	if b.flocks == nil {
		b.flocks = map[*handle]uint64{}
	}
	b.nextID++
	b.flocks[h] = b.nextID
	return b.nextID
}

func (b *lockBook) dropFlock(h *handle) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.flocks, h)
}

func (b *lockBook) begin(f *file, path string) *fileLocks {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.files == nil {
		b.files = map[*file]*fileLocks{}
	}
	fl := b.files[f]
	if fl == nil {
		fl = &fileLocks{key: path, owners: map[lockOwner]holder{}}
		b.files[f] = fl
	}
	fl.busy++
	return fl
}

// end records whether o still holds a range of f after a request.
func (b *lockBook) end(f *file, fl *fileLocks, o lockOwner, who holder, held bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if held {
		fl.owners[o] = who
	} else {
		delete(fl.owners, o)
	}
	b.doneLocked(f, fl)
}

// done ends a request that changed nothing.
func (b *lockBook) done(f *file, fl *fileLocks) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.doneLocked(f, fl)
}

func (b *lockBook) doneLocked(f *file, fl *fileLocks) {
	fl.busy--
	if fl.busy == 0 && len(fl.owners) == 0 {
		delete(b.files, f)
	}
}

func (b *lockBook) holds(f *file, o lockOwner) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	fl := b.files[f]
	if fl == nil {
		return false
	}
	_, ok := fl.owners[o]
	return ok
}

// heldBy reports whether process pid holds a script lock through this
// daemon. A flock whose handles were all closed since their last use is
// not counted: it ends with their RELEASE, on its way after close()
// returned (closedLocked), and a script that closed its LOCK_SH reader
// holds nothing when it opens the file to rewrite it.
func (b *lockBook) heldBy(pid uint32) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, fl := range b.files {
		for o, w := range fl.owners {
			if w.pid == pid && !(o.flock && b.closedLocked(o.id)) {
				return true
			}
		}
	}
	return false
}

// lostBy reports whether process pid holds a script lock (on any file:
// scripts often lock a separate lock file) tied to a lease other than
// lease, the one a commit's lock was just fenced with: that lease ended,
// and with it the lock, which another host may have taken meanwhile.
func (b *lockBook) lostBy(pid uint32, lease int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, fl := range b.files {
		for _, w := range fl.owners {
			if w.pid == pid && w.lease != lease {
				return true
			}
		}
	}
	return false
}

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

func (n *Node) lockRequest(key string, o lockOwner, lk *fuse.FileLock) scriptlock.Request {
	return scriptlock.Request{Key: key, Owner: o.id, Flock: o.flock, Pid: lk.Pid,
		Range: scriptlock.Range{Start: lk.Start, End: lk.End, Type: lk.Typ}}
}

// ownerOf is the owner of a request: the kernel's for fcntl locks, the
// handle for flock (see lockBook.flocks); ok false: a flock unlock of a
// handle that holds none.
func (n *Node) ownerOf(fh gofs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32) (lockOwner, bool) {
	o := lockOwner{id: owner, flock: flags&fuse.LK_FLOCK != 0}
	h, ok := fh.(*handle)
	if !o.flock || !ok {
		return o, true
	}
	o.id = n.r.book.flockID(h, lk.Typ != unix.F_UNLCK)
	if flags&releasing != 0 {
		defer n.r.book.dropFlock(h)
	}
	return o, o.id != 0
}

func (n *Node) Getlk(ctx context.Context, fh gofs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	sl := n.r.opts.ScriptLocks
	if sl == nil {
		return syscall.ENOTSUP
	}
	o, _ := n.ownerOf(fh, owner, lk, flags)
	fl := n.r.book.begin(n.f, n.lockPath())
	defer n.r.book.done(n.f, fl)
	h, ok, err := sl.Get(ctx, n.lockRequest(fl.key, o, lk))
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
		if !o.flock {
			n.rawLock(fh, lk) // SQLite's lock bytes (raw.go)
		}
	}
	if lk.Typ == unix.F_UNLCK {
		if !ok || !n.r.book.holds(n.f, o) {
			return 0 // the unlock of every close, by an owner holding nothing
		}
		// An unlock is never given up half way for an interrupt.
		ctx = context.Background()
		if flags&releasing != 0 {
			n.r.crash("flock-release") // a stop point for tests only
		}
	}
	fl := n.r.book.begin(n.f, n.lockPath())
	before := n.r.book.holds(n.f, o)
	var published error
	if before && lk.Typ != unix.F_WRLCK {
		// A release or a downgrade lets others in: what the holder
		// wrote must be in place first, as on a local file system.
		published = n.r.publishBeforeUnlock(caller, fh)
	}
	// Read before the request: a lease changed meanwhile is then seen as
	// lost (refused at commit), never the other way round.
	who := holder{pid: lk.Pid, lease: leaseOf(sl)}
	req := n.lockRequest(fl.key, o, lk)
	held, err := sl.Set(ctx, req, wait)
	if !wait && o.flock && errors.Is(err, scriptlock.ErrConflict) && n.r.book.closedHolders(n.f, o) {
		held, err = awaitRelease(ctx, sl, req) // locks_closed.go
	}
	if errors.Is(err, scriptlock.ErrUnavailable) {
		held = before // unknown: an unlock at close tries again
	}
	n.r.book.end(n.f, fl, o, who, held)
	n.noteFcntl(fh, o, held)
	if held && err == nil && lk.Typ != unix.F_UNLCK {
		n.r.afterGrant(caller, fh) // unlock.go
	}
	n.r.log.Debug("script lock", zap.String("key", fl.key), zap.Uint64("owner", o.id), zap.Bool("flock", o.flock),
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
		if pid != 0 && h.n.r.book.lostBy(pid, lease) {
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
