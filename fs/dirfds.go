package fs

import (
	"slices"
	"syscall"
)

// Directory descriptors. Every backing call is made at a directory's
// O_PATH fd (internal/backing), so a directory node needs one while a
// request works in it. It is held while requests use it (holdDir,
// dropDir: never closed under one), and kept after that among a bounded
// number of idle ones, the least recently used closed first
// (internal/dirfds). One closed is opened again at its next use, through
// a name checked (by device and inode) to lead to that very directory
// (openSelf), as at its first use: a directory renamed directly in
// BACKING while its fd was closed is then ESTALE for requests through
// its old node (the kernel looks the path up again), as a file is.

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
	if fd, ok := n.r.dirs.Held(&n.dir); ok {
		return fd, nil
	}
	if len(chain) >= maxReopen || slices.Contains(chain, n) {
		return -1, syscall.ELOOP
	}
	fd, err := n.openSelfIn(append(chain, n)) // holds the parent's fd meanwhile
	if err != nil {
		return -1, err
	}
	return n.r.dirs.Keep(&n.dir, fd), nil
}

// dropDir ends a use of the fd holdDir returned: the fd joins the idle
// ones, or closes if the kernel forgot the directory or the mount has
// ended.
func (n *Node) dropDir() {
	if n.isRoot() {
		return
	}
	n.r.dirs.Drop(&n.dir)
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
