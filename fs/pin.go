package fs

import (
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
)

// A logical file is found by the backing inode of its committed version
// (ids.byKey), and an inode number is reused by the backing file system
// as soon as the inode is freed. While a file has open handles, anything
// can act on it through them (fchmod, a reopen of /proc/self/fd/N), so
// its committed version must never be freed under it: if it were (the
// name removed directly in BACKING), the next new file of another user
// could take its number and be taken for it. So f holds its committed
// version open (O_PATH) while it has handles: the number stays its own.
// Without handles a number found again is taken for f only through a
// name of f that leads to it (named). docs/design: "Identity".

// pinned reports whether f holds its committed version, or the version
// it had when it lost its last name (ghost), open. f.mu is held.
func (f *file) pinned() bool { return f.pin >= 0 || f.ghost >= 0 }

// pathIfKey opens an O_PATH fd of the inode fd is open on, if that is
// backing inode k; -1 otherwise. O_PATH: a pin must not count as a
// reader or a writer (leases, exec).
func pathIfKey(fd int, k key) int {
	if fd < 0 {
		return -1
	}
	if st, err := backing.Fstat(fd); err != nil || keyOf(&st) != k {
		return -1
	}
	p, err := unix.Open(backing.ProcPath(fd), unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return p
}

// repin makes f's pin its committed version, which fd is open on, after
// a commit or an adoption changed it (the caller has rekeyed f).
func (f *file) repin(fd int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.handles) == 0 {
		return
	}
	closeFd(f.pin)
	f.pin = pathIfKey(fd, f.key)
}

// repinNamed pins f's committed version through a name that leads to
// it, when another daemon's commit became f's version (adopted).
func (n *Node) repinNamed() {
	if !n.f.hasHandles() {
		return
	}
	v, err := n.findNamed()
	if err != nil {
		return
	}
	defer v.release()
	n.f.repin(v.fd)
}
