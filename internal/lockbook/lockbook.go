// Package lockbook is the daemon's record of the script locks (flock,
// fcntl, OFD) held through it: which owners hold a range of which file,
// under which key, for which process and lease. The lock table itself
// (scriptlock) decides; the book remembers what it granted, so that an
// unlock of an owner holding nothing skips the table, a renamed file
// keeps its key while locked, flock owners are numbered per open file,
// and OFD locks end with their open file.
package lockbook

import "sync"

// Handle is an open file through which locks are asked for (fs's
// handle): a flock owner is one, and OFD locks are released with one.
type Handle interface {
	comparable
	// ClosedSinceUse reports whether the handle was closed since its
	// last use (flushed), or its close is not told to the daemon
	// (FOPEN_NOFLUSH): its flock, if it is the last, ends with its
	// RELEASE, on its way.
	ClosedSinceUse() bool
}

// Owner owns locks: for fcntl locks the kernel's owner (a process's
// files, or the open file for OFD locks); for flock the daemon's number
// of the handle (see Book.FlockID).
type Owner struct {
	ID    uint64
	Flock bool
}

// FileLocks is what this daemon holds on one logical file.
type FileLocks struct {
	Key    string           // the path the first lock was taken at
	owners map[Owner]Holder // owners holding a range
	busy   int              // requests in progress
}

// Holder is who holds an owner's locks: the process, and the lease the
// lock table tied them to when last granted (0: none).
type Holder struct {
	Pid   uint32
	Lease int64
}

// Book is the daemon's own record of who holds script locks: it
// keeps a file's key while any lock is held (a rename then does not
// split the file's locks between two keys), lets the unlock the kernel
// sends at every close skip the table when the owner holds nothing, and
// tells read-modify-write learning which processes lock. F is a logical
// file, H an open file; the zero value is empty.
type Book[F comparable, H Handle] struct {
	mu    sync.Mutex
	files map[F]*FileLocks
	// flock owners are open files, but the kernel's owner number (the
	// struct file's address) is reused as soon as a file is freed, while
	// its RELEASE, which ends its flock lock, is still on the way: the
	// next open file would take over the old lock. So a flock owner is
	// the handle, numbered here until its release.
	flocks map[H]uint64
	nextID uint64
	// via are, per handle, the fcntl owners that locked through it and
	// hold a lock still (ofd.go).
	via map[H]map[uint64]bool
}

// FlockID returns h's flock owner number; add: give it one if it has
// none, else 0.
func (b *Book[F, H]) FlockID(h H, add bool) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if id, ok := b.flocks[h]; ok || !add {
		return id
	}
	if b.flocks == nil {
		b.flocks = map[H]uint64{}
	}
	b.nextID++
	b.flocks[h] = b.nextID
	return b.nextID
}

// DropFlock forgets h's flock owner number: h is released.
func (b *Book[F, H]) DropFlock(h H) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.flocks, h)
}

// Begin starts a request on f, whose key is path if no lock is held
// on it; End or Done ends it.
func (b *Book[F, H]) Begin(f F, path string) *FileLocks {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.files == nil {
		b.files = map[F]*FileLocks{}
	}
	fl := b.files[f]
	if fl == nil {
		fl = &FileLocks{Key: path, owners: map[Owner]Holder{}}
		b.files[f] = fl
	}
	fl.busy++
	return fl
}

// End records whether o still holds a range of f after a request.
func (b *Book[F, H]) End(f F, fl *FileLocks, o Owner, who Holder, held bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if held {
		fl.owners[o] = who
	} else {
		delete(fl.owners, o)
	}
	b.doneLocked(f, fl)
}

// Done ends a request that changed nothing.
func (b *Book[F, H]) Done(f F, fl *FileLocks) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.doneLocked(f, fl)
}

func (b *Book[F, H]) doneLocked(f F, fl *FileLocks) {
	fl.busy--
	if fl.busy == 0 && len(fl.owners) == 0 {
		delete(b.files, f)
	}
}

// Holds reports whether o holds a range of f.
func (b *Book[F, H]) Holds(f F, o Owner) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	fl := b.files[f]
	if fl == nil {
		return false
	}
	_, ok := fl.owners[o]
	return ok
}

// HeldBy reports whether process pid holds a script lock through this
// daemon. A flock whose handles were all closed since their last use is
// not counted: it ends with their RELEASE, on its way after close()
// returned (closedLocked), and a script that closed its LOCK_SH reader
// holds nothing when it opens the file to rewrite it.
func (b *Book[F, H]) HeldBy(pid uint32) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, fl := range b.files {
		for o, w := range fl.owners {
			if w.Pid == pid && !(o.Flock && b.closedLocked(o.ID)) {
				return true
			}
		}
	}
	return false
}

// LostBy reports whether process pid holds a script lock (on any file:
// scripts often lock a separate lock file) tied to a lease other than
// lease, the one a commit's lock was just fenced with: that lease ended,
// and with it the lock, which another host may have taken meanwhile.
func (b *Book[F, H]) LostBy(pid uint32, lease int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, fl := range b.files {
		for _, w := range fl.owners {
			if w.Pid == pid && w.Lease != lease {
				return true
			}
		}
	}
	return false
}
