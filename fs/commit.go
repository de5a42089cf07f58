package fs

import (
	"context"
	"errors"
	"os"
	"syscall"

	"github.com/safefs/safefs/internal/backing"
	"github.com/safefs/safefs/lockmgr"
)

// commit publishes the handle's pending version under the file's lock.
// h.mu is held. On failure the previous version stays and the pending
// version is kept in rejected/ for the operator.
func (h *handle) commit() error {
	h.notePending()
	h.obsStart()
	defer h.obsEnd() // after the lock is released
	// Its file became raw meanwhile: raw from now on (rawfile.go).
	defer h.switchRaw()
	defer h.rmwBusy()()
	err := h.commitLocked()
	h.p.appendAgain()
	return err
}

func (h *handle) commitLocked() error {
	r := h.n.r
	defer r.changes.Begin()()
	ctx, cancel := lockContext(r)
	defer cancel()
	key := h.n.lockKey()
	held, err := r.locks.Lock(ctx, h.who(), key)
	h.obsLocked()
	if err != nil && h.pub.soft {
		h.obs = nil // neither made nor rejected: tried again (appendpub.go)
		return h.publishLater(err)
	}
	if err != nil {
		return h.reject(err)
	}
	defer held.Release()
	g := grant{held, key.Name, h}
	base := h.base
	onBase := false // the commit wrote base's own inode
	switch {
	case h.p.appends() && h.appendReplaces():
		// A passed-through reader reads the committed inode itself.
		if err = h.unappend(false); err == nil {
			err = h.commitWhole(g)
		}
	case h.p.appends():
		onBase, err = h.commitAppend(g)
	case h.p.newFile:
		onBase, err = h.commitNew(g)
	default:
		err = h.commitWhole(g)
	}
	if errors.Is(err, errCloserKilled) {
		h.killedClose(h.closer)
		return nil
	}
	if err != nil {
		return h.reject(err)
	}
	h.n.f.bump()
	r.rolesCommitted(h.n.f, onBase)
	if h.base != base || onBase || h.baseIsCurrent() {
		// A replace made the staging file base, an append or an in-place
		// commit wrote base's inode: it is the version just bumped to (no
		// other commit of the file runs: we hold its lock), so the next
		// stat or read need not reopen it.
		h.baseVer = h.n.f.ver()
	}
	if !h.wrote || !r.writesUncache.Load() || h.modeDropped {
		h.n.f.uncache(h.n.EmbeddedInode())
	}
	h.modeDropped = false
	r.count.commits.Add(1)
	h.rmwCommitted()
	return nil
}

// errUnlinked: the file has no name left, so a commit has nowhere to go.
// The handle keeps its pending version as its content, as an unlinked
// file keeps its data while open.
var errUnlinked = errors.New("file has no name")

// locate finds, under the file's lock, a name that still leads to the
// backing inode the file's committed version is (no commit of it is in
// progress, so findNamed sees no other). A name that now leads elsewhere
// was changed directly in BACKING: committing there would put the
// writer's bytes in another file, so that is ESTALE; so is a directory
// moved out of BACKING. The caller releases v (v.release).
func (n *Node) locate(g grant) (v named, err error) {
	if len(n.f.nameList()) == 0 {
		return noName, errUnlinked
	}
	v, err = n.findNamed()
	if errors.Is(err, syscall.ENOENT) && n.adopt(g) {
		v, err = n.findNamed()
	}
	if errors.Is(err, syscall.ENOENT) {
		// Its names lead to other files: changed outside the mount.
		return noName, syscall.ESTALE
	}
	if err != nil {
		return noName, err
	}
	if _, err := v.in.writeDir(); err != nil {
		v.release()
		return noName, err
	}
	v.in.dropDir()
	return v, nil
}

// reopen opens the located version itself (not its name) for writing.
// The file's lock is held: another process's lease on it is
// backing.ErrLeased at once, never waited for (lease.go). Tests that need
// a commit held under its lock set SAFEFS_TEST_LEASE_WAIT: a lease they
// take is then waited for that long (a goroutine sleeping, no thread
// blocked).
func (v named) reopen(flags int) (*os.File, error) {
	fd, err := backing.ReopenFd(v.fd, flags)
	if errors.Is(err, backing.ErrLeased) && v.in.r.testLeaseWait > 0 {
		w := backing.LeaseWaiter{Limit: v.in.r.testLeaseWait}
		for errors.Is(err, backing.ErrLeased) && w.Again(context.Background()) {
			fd, err = backing.ReopenFd(v.fd, flags)
		}
	}
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), v.nm), nil
}

// commitWhole publishes the staging file: by rename when the file has one
// name, in place (with an undo copy) when it has several, so hard links
// stay one file, or when it is raw, so that the handles serving it in
// place stay on it (rawfile.go).
func (h *handle) commitWhole(g grant) error {
	v, err := h.n.locate(g)
	if errors.Is(err, errUnlinked) {
		h.p.state = clean
		return nil
	}
	if err != nil {
		return err
	}
	defer v.release()
	if v.st.Nlink > 1 || h.n.f.isRaw() {
		h.obsKind(KindInPlace)
		return h.commitInPlace(g, v)
	}
	return h.commitReplace(g, v)
}

// lockContext bounds a lock wait by lock_timeout. It is not the request's
// context: go-fuse cancels that on any signal, SIGURG included.
// Only etcd's locks need it: the local lock manager has the same timeout
// and starts its timer only when a lock must wait, so an uncontended
// commit starts none (a timer may also wake the runtime's poller).
func lockContext(r *root) (context.Context, context.CancelFunc) {
	if !r.clustered() {
		return context.Background(), func() {}
	}
	return context.WithTimeout(context.Background(), r.opts.LockTimeout)
}

// lockErrno maps a failed lock wait to the documented errno.
func lockErrno(err error) error {
	if e, ok := clusterErrno(err); ok {
		return e
	}
	switch {
	case errors.Is(err, lockmgr.ErrTooManyWaiters):
		return syscall.EAGAIN
	case errors.Is(err, lockmgr.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return syscall.ETIMEDOUT
	}
	return err
}
