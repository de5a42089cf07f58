// Package dirfds keeps the O_PATH descriptors of directories that
// requests work in: held while requests use them (never closed under
// one), and kept after that among at most Kept idle ones, the least
// recently used closed first. Held from first use until the kernel
// forgot the directory, they had no bound: www-data, holding 20,000
// directories open through the mount, took every descriptor the daemon
// had, and root's requests then failed with EMFILE. How a directory's
// fd is opened (again) is the caller's (fs's dirfds.go).
package dirfds

import (
	"sync"

	"golang.org/x/sys/unix"
)

// Kept bounds the idle directory fds: they come out of the descriptors
// kept for root's callers, directories and the journal (internal/limits).
// Those in use by requests come on top.
const Kept = 256

// Entry is one directory's fd and its place among the idle ones (fs
// keeps one in each directory node); all under its Cache's mutex.
type Entry struct {
	fd         int // -1 when closed
	use        int // the requests using it
	gone, idle bool
	prev, next *Entry
}

// NewEntry is an entry without an fd.
func NewEntry() Entry { return Entry{fd: -1} }

// Cache is the set of entries holding an fd. The zero value is empty.
type Cache struct {
	mu      sync.Mutex
	entries map[*Entry]struct{} // every entry holding an fd
	// The idle entries (use 0), least recently used first.
	head, tail *Entry
	idle       int
	// closed: the mount has ended (CloseAll): an fd closes once no
	// request uses it.
	closed bool
}

// Held returns e's fd, counted as used until the matching Drop, if it
// has one.
func (d *Cache) Held(e *Entry) (int, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e.fd < 0 {
		return -1, false
	}
	d.useLocked(e)
	return e.fd, true
}

// Keep gives e the fd fd, just opened, unless another request gave it
// one meanwhile (then fd is closed), and returns e's fd, counted as used
// until the matching Drop.
func (d *Cache) Keep(e *Entry, fd int) int {
	d.mu.Lock()
	extra := -1
	if e.fd >= 0 {
		extra = fd // another request opened it meanwhile
	} else {
		e.fd = fd
		if d.entries == nil {
			d.entries = map[*Entry]struct{}{}
		}
		d.entries[e] = struct{}{}
	}
	d.useLocked(e)
	fd = e.fd
	d.mu.Unlock()
	closeFd(extra)
	return fd
}

// Drop ends a use of e's fd: the fd joins the idle ones (the least
// recently used beyond Kept are closed), or closes if the directory was
// forgotten or the mount has ended.
func (d *Cache) Drop(e *Entry) {
	var closing []int
	d.mu.Lock()
	if e.use--; e.use == 0 {
		if e.gone || d.closed {
			closing = append(closing, d.takeLocked(e))
		} else {
			d.pushIdleLocked(e)
			for d.idle > Kept {
				closing = append(closing, d.takeLocked(d.head))
			}
		}
	}
	d.mu.Unlock()
	for _, fd := range closing {
		closeFd(fd)
	}
}

// useLocked counts a use of e's fd: an idle one leaves the idle list.
func (d *Cache) useLocked(e *Entry) {
	if e.use == 0 {
		d.unlinkLocked(e)
	}
	e.use++
}

// Forget closes e's fd, or marks it to close at its last Drop: the
// kernel forgot the directory.
func (d *Cache) Forget(e *Entry) {
	d.mu.Lock()
	e.gone = true
	fd := -1
	if e.use == 0 {
		fd = d.takeLocked(e)
	}
	d.mu.Unlock()
	closeFd(fd)
}

// CloseAll closes every fd no request uses, and those in use at their
// last Drop. The kernel need not forget every inode before an unmount
// completes: so nothing of BACKING stays open (busy) after it.
func (d *Cache) CloseAll() {
	var closing []int
	d.mu.Lock()
	d.closed = true
	for e := range d.entries {
		if e.use == 0 {
			closing = append(closing, d.takeLocked(e))
		}
	}
	d.mu.Unlock()
	for _, fd := range closing {
		closeFd(fd)
	}
}

// takeLocked takes e's fd from it (-1 if none), for the caller to close.
func (d *Cache) takeLocked(e *Entry) int {
	d.unlinkLocked(e)
	delete(d.entries, e)
	fd := e.fd
	e.fd = -1
	return fd
}

// pushIdleLocked puts e last (most recently used) in the idle list.
func (d *Cache) pushIdleLocked(e *Entry) {
	e.prev, e.next, e.idle = d.tail, nil, true
	if d.tail != nil {
		d.tail.next = e
	} else {
		d.head = e
	}
	d.tail = e
	d.idle++
}

func (d *Cache) unlinkLocked(e *Entry) {
	if !e.idle {
		return
	}
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		d.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		d.tail = e.prev
	}
	e.prev, e.next, e.idle = nil, nil, false
	d.idle--
}

func closeFd(fd int) {
	if fd >= 0 {
		unix.Close(fd)
	}
}
