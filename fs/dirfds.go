package fs

import (
	"slices"
	"sync"
	"syscall"
)

// Directory descriptors. Every backing call is made at a directory's
// O_PATH fd (backing.go), so a directory node needs one while a request
// works in it. Held from first use until the kernel forgot the
// directory, they had no bound: www-data, holding 20,000 directories
// open through the mount, took every descriptor the daemon had, and
// root's requests then failed with EMFILE. So a directory's fd is held
// while requests use it (holdDir, dropDir: never closed under one), and
// kept after that among at most dirFdsKept idle ones, the least recently
// used closed first. One closed is opened again at its next use, through
// a name checked (by device and inode) to lead to that very directory
// (openSelf), as at its first use: a directory renamed directly in
// BACKING while its fd was closed is then ESTALE for requests through
// its old node (the kernel looks the path up again), as a file is.

// dirFdsKept bounds the idle directory fds: they come out of the
// descriptors kept for root's callers, directories and the journal
// (internal/limits). Those in use by requests come on top.
const dirFdsKept = 256

// openDirs are the directory nodes holding an fd; mu guards every node's
// dirfd, dirUse, dirGone and its place in the idle list.
type openDirs struct {
	mu    sync.Mutex
	nodes map[*Node]struct{} // every node holding an fd
	// The idle nodes (dirUse 0), least recently used first.
	head, tail *Node
	idle       int
	// closed: the mount has ended (closeAll): an fd closes once no
	// request uses it.
	closed bool
}

// holdDir returns the directory's O_PATH fd, opened through a name that
// still leads to it when it has none (see above): it stays open, and
// names this directory, until the matching dropDir. It follows the
// directory through renames meanwhile, so names built under it cannot go
// astray; writes check with writeDir that it has not left BACKING.
func (n *Node) holdDir() (int, error) { return n.holdDirIn(nil) }

// maxReopen bounds the directories opened again for one request, each
// through its parent's fd (openSelfIn): a chain that long, or one that
// comes back to a directory it is opening (names seen before changes
// made directly in BACKING can make a loop), is ELOOP.
const maxReopen = 4096

// holdDirIn is holdDir for a directory opened again on the way to the
// ones of chain (see findNamedIn).
func (n *Node) holdDirIn(chain []*Node) (int, error) {
	if n.isRoot() {
		return n.r.rootfd, nil
	}
	d := &n.r.dirs
	d.mu.Lock()
	if n.dirfd >= 0 {
		d.useLocked(n)
		fd := n.dirfd
		d.mu.Unlock()
		return fd, nil
	}
	d.mu.Unlock()
	if len(chain) >= maxReopen || slices.Contains(chain, n) {
		return -1, syscall.ELOOP
	}
	fd, err := n.openSelfIn(append(chain, n)) // holds the parent's fd meanwhile
	if err != nil {
		return -1, err
	}
	d.mu.Lock()
	extra := -1
	if n.dirfd >= 0 {
		extra = fd // another request opened it meanwhile
	} else {
		n.dirfd = fd
		if d.nodes == nil {
			d.nodes = map[*Node]struct{}{}
		}
		d.nodes[n] = struct{}{}
	}
	d.useLocked(n)
	fd = n.dirfd
	d.mu.Unlock()
	closeFd(extra)
	return fd, nil
}

// dropDir ends a use of the fd holdDir returned: the fd joins the idle
// ones (the least recently used beyond dirFdsKept are closed), or closes
// if the kernel forgot the directory or the mount has ended.
func (n *Node) dropDir() {
	if n.isRoot() {
		return
	}
	d := &n.r.dirs
	var closing []int
	d.mu.Lock()
	if n.dirUse--; n.dirUse == 0 {
		if n.dirGone || d.closed {
			closing = append(closing, d.takeLocked(n))
		} else {
			d.pushIdleLocked(n)
			for d.idle > dirFdsKept {
				closing = append(closing, d.takeLocked(d.head))
			}
		}
	}
	d.mu.Unlock()
	for _, fd := range closing {
		closeFd(fd)
	}
}

// useLocked counts a use of n's fd: an idle one leaves the idle list.
func (d *openDirs) useLocked(n *Node) {
	if n.dirUse == 0 {
		d.unlinkLocked(n)
	}
	n.dirUse++
}

// forget closes n's fd, or marks it to close at its last dropDir: the
// kernel forgot the directory.
func (d *openDirs) forget(n *Node) {
	d.mu.Lock()
	n.dirGone = true
	fd := -1
	if n.dirUse == 0 {
		fd = d.takeLocked(n)
	}
	d.mu.Unlock()
	closeFd(fd)
}

// closeAll closes every fd no request uses, and those in use at their
// last dropDir. The kernel need not forget every inode before an
// unmount completes: so nothing of BACKING stays open (busy) after it.
func (d *openDirs) closeAll() {
	var closing []int
	d.mu.Lock()
	d.closed = true
	for n := range d.nodes {
		if n.dirUse == 0 {
			closing = append(closing, d.takeLocked(n))
		}
	}
	d.mu.Unlock()
	for _, fd := range closing {
		closeFd(fd)
	}
}

// takeLocked takes n's fd from it (-1 if none), for the caller to close.
func (d *openDirs) takeLocked(n *Node) int {
	d.unlinkLocked(n)
	delete(d.nodes, n)
	fd := n.dirfd
	n.dirfd = -1
	return fd
}

// pushIdleLocked puts n last (most recently used) in the idle list.
func (d *openDirs) pushIdleLocked(n *Node) {
	n.dirPrev, n.dirNext, n.dirIdle = d.tail, nil, true
	if d.tail != nil {
		d.tail.dirNext = n
	} else {
		d.head = n
	}
	d.tail = n
	d.idle++
}

func (d *openDirs) unlinkLocked(n *Node) {
	if !n.dirIdle {
		return
	}
	if n.dirPrev != nil {
		n.dirPrev.dirNext = n.dirNext
	} else {
		d.head = n.dirNext
	}
	if n.dirNext != nil {
		n.dirNext.dirPrev = n.dirPrev
	} else {
		d.tail = n.dirPrev
	}
	n.dirPrev, n.dirNext, n.dirIdle = nil, nil, false
	d.idle--
}

// withDir runs fn on n's directory fd, held meanwhile.
func (n *Node) withDir(fn func(dir int) error) error {
	dir, err := n.holdDir()
	if err != nil {
		return err
	}
	defer n.dropDir()
	return fn(dir)
}
