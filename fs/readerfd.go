package fs

import (
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A reader node (roles.go) serves one version for its whole life, yet
// each read-only open of it found that version again by name: an O_PATH
// open, its fstat, a reopen through /proc and a close (openRegularStat),
// about 15 µs here, for every page a web server serves. So a reader node
// keeps a descriptor of its version from its first cached reader
// (rl.fd), and the next reader of the same version takes a duplicate of
// it once a stat of the name shows the name still leads there (a file
// replaced directly in BACKING is opened anew, by name). The descriptor
// goes when the node turns direct, when a commit makes its version old,
// when the kernel forgets the node, at unmount, and once no reader has
// held or taken it for keptIdle: a version deleted or replaced in
// BACKING is not held open (its space) longer than that.

// readerVersion returns a duplicate of n's version descriptor, the
// stat of its name and the file's version, for a read-only open; ok
// false: open by name.
func (n *Node) readerVersion() (base *os.File, st *unix.Stat_t, ver uint64, ok bool) {
	f := n.f
	if !n.r.opts.VersionCache || f.kind != unix.S_IFREG {
		return nil, nil, 0, false
	}
	f.mu.Lock()
	fd, k := -1, n.rl.key
	if n.rl.fd != nil && n.rl.role == roleReader && n.rl.ver == f.version {
		var err error
		if fd, err = unix.FcntlInt(n.rl.fd.Fd(), unix.F_DUPFD_CLOEXEC, 0); err != nil {
			fd = -1
		} else {
			n.rl.fdUsed = time.Now().UnixNano()
		}
	}
	ver = f.version
	f.mu.Unlock()
	if fd < 0 {
		return nil, nil, 0, false
	}
	v, ok := n.statName(func(_ name, st *unix.Stat_t) bool { return keyOf(st) == k })
	if !ok || n.r.ids.current(f) != k {
		unix.Close(fd) // the name leads elsewhere: open by name
		return nil, nil, 0, false
	}
	n.r.count.versionFd.Add(1)
	return os.NewFile(uintptr(fd), v.nm), &v.st, ver, true
}

// keepReaderFd gives n a descriptor of its version from h, a reader
// that just became a cached reader of it (f.mu held).
func (n *Node) keepReaderFd(h *handle) {
	if n.rl.fd != nil || !n.r.readerFds.add(n) {
		return
	}
	fd, err := unix.FcntlInt(h.base.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		n.r.readerFds.drop(n)
		return
	}
	n.rl.fd = os.NewFile(uintptr(fd), "version")
	n.rl.fdUsed = time.Now().UnixNano()
}

// dropReaderFd closes n's version descriptor, if any (f.mu held).
func (n *Node) dropReaderFd() {
	if fd := n.takeReaderFd(); fd != nil {
		go fd.Close() // not under f.mu: see takeReaderFd
	}
}

// takeReaderFd removes n's version descriptor (f.mu held); the caller
// closes it outside the lock (closeFiles): the last close of a replaced
// version frees it in the file system.
func (n *Node) takeReaderFd() *os.File {
	fd := n.rl.fd
	if fd != nil {
		n.rl.fd = nil
		n.r.readerFds.drop(n)
	}
	return fd
}

// takeReaderFds removes the version descriptors of f's reader nodes
// (f.mu held).
func (f *file) takeReaderFds() []*os.File {
	var fds []*os.File
	for n := range f.roles.readers {
		if fd := n.takeReaderFd(); fd != nil {
			fds = append(fds, fd)
		}
	}
	return fds
}

// dropReaderFds closes the version descriptors of f's reader nodes.
func (f *file) dropReaderFds() {
	f.mu.Lock()
	fds := f.takeReaderFds()
	f.mu.Unlock()
	closeFiles(fds)
}

func closeFiles(fds []*os.File) {
	for _, fd := range fds {
		if fd != nil {
			fd.Close()
		}
	}
}

// keptFds are the nodes holding a version descriptor, swept each
// keptIdle by a goroutine that runs while there are any. At most
// maxKeptFds: the descriptors are the daemon's, and the per-user file
// slots (limits.go) do not count them, so a script reading many files
// in turn must not spend the daemon's reserve.
type keptFds struct {
	mu       sync.Mutex
	nodes    map[*Node]struct{}
	sweeping bool
}

const (
	keptIdle   = time.Second
	maxKeptFds = 256
)

// add makes room for n's descriptor (n's f.mu held); false when full.
func (k *keptFds) add(n *Node) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.nodes) >= maxKeptFds {
		return false
	}
	if k.nodes == nil {
		k.nodes = map[*Node]struct{}{}
	}
	k.nodes[n] = struct{}{}
	if !k.sweeping {
		k.sweeping = true
		go n.r.sweepKept()
	}
	return true
}

// drop forgets n (n's f.mu held).
func (k *keptFds) drop(n *Node) {
	k.mu.Lock()
	delete(k.nodes, n)
	k.mu.Unlock()
}

func (r *root) sweepKept() {
	for {
		time.Sleep(keptIdle)
		if !r.sweepOnce() {
			return
		}
	}
}

// sweepOnce closes the descriptors no cached reader holds and no open
// took for keptIdle; false when none is kept any more (the sweeper ends:
// the next node kept starts another).
func (r *root) sweepOnce() bool {
	k := &r.readerFds
	k.mu.Lock()
	nodes := slices.Collect(maps.Keys(k.nodes))
	k.mu.Unlock()
	now := time.Now().UnixNano()
	var idle []*os.File
	for _, n := range nodes {
		n.f.mu.Lock()
		if n.rl.cached == 0 && now-n.rl.fdUsed >= int64(keptIdle) {
			idle = append(idle, n.takeReaderFd())
		}
		n.f.mu.Unlock()
	}
	closeFiles(idle)
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.nodes) == 0 {
		k.sweeping = false
		return false
	}
	return true
}
