package fs

import (
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// A reader node (roles.go) serves one version for its whole life, yet
// each read-only open of it found that version again by name: an O_PATH
// open, its fstat, a reopen through /proc and a close
// (backing.OpenRegularStat), about 15 µs here, for every page a web
// server serves. So a reader node
// keeps a descriptor of its version from its first cached reader
// (rl.fd), and the next reader of the same version reads through it once
// a stat of the name shows the name still leads there (a file replaced
// directly in BACKING is opened anew, by name). The node lets the
// descriptor go when it turns direct, when a commit makes its version
// old, when the kernel forgets the node, at unmount, and once no reader
// has held or taken it for keptIdle; the last of the node and the
// readers' handles to let it go closes it: a version deleted or replaced
// in BACKING is not held open (its space) longer than its readers.
//
// The handles share the node's descriptor (sharedFile) rather than each
// taking a duplicate: a dup, the fcntl of os.NewFile and a close less per
// open and release. Every holder reads with pread, and a duplicate shared
// the file description (offset, flags) anyway.

// sharedFile is a descriptor held by a node and the handles reading
// through it: the last to let go closes it.
type sharedFile struct {
	f    *os.File
	refs atomic.Int32
}

func newShared(f *os.File) *sharedFile {
	s := &sharedFile{f: f}
	s.refs.Store(1)
	return s
}

func (s *sharedFile) hold() { s.refs.Add(1) }

func (s *sharedFile) release() {
	if s.refs.Add(-1) == 0 {
		s.f.Close()
	}
}

// readerVersion returns n's version descriptor, held for the caller,
// the stat of its name and the file's version, for a read-only open; ok
// false: open by name.
func (n *Node) readerVersion() (s *sharedFile, st *unix.Stat_t, ver uint64, ok bool) {
	f := n.f
	if !n.r.opts.VersionCache || f.kind != unix.S_IFREG {
		return nil, nil, 0, false
	}
	f.mu.Lock()
	k := n.rl.key
	if n.rl.fd != nil && n.rl.role == roleReader && n.rl.ver == f.version {
		s = n.rl.fd
		s.hold()
		n.rl.fdUsed = time.Now().UnixNano()
	}
	ver = f.version
	f.mu.Unlock()
	if s == nil {
		return nil, nil, 0, false
	}
	v, ok := n.statName(func(_ name, st *unix.Stat_t) bool { return keyOf(st) == k })
	if !ok || n.r.ids.current(f) != k {
		s.release() // the name leads elsewhere: open by name
		return nil, nil, 0, false
	}
	n.r.count.versionFd.Add(1)
	return s, &v.st, ver, true
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
	n.rl.fd = newShared(os.NewFile(uintptr(fd), "version"))
	n.rl.fdUsed = time.Now().UnixNano()
}

// dropReaderFd lets n's version descriptor go, if any (f.mu held).
func (n *Node) dropReaderFd() {
	if fd := n.takeReaderFd(); fd != nil {
		go fd.release() // not under f.mu: see takeReaderFd
	}
}

// takeReaderFd removes n's version descriptor (f.mu held); the caller
// lets it go outside the lock (releaseAll): the last close of a replaced
// version frees it in the file system.
func (n *Node) takeReaderFd() *sharedFile {
	fd := n.rl.fd
	if fd != nil {
		n.rl.fd = nil
		n.r.readerFds.drop(n)
	}
	return fd
}

// takeReaderFds removes the version descriptors of f's reader nodes
// (f.mu held).
func (f *file) takeReaderFds() []*sharedFile {
	var fds []*sharedFile
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
	releaseAll(fds)
}

func releaseAll(fds []*sharedFile) {
	for _, fd := range fds {
		if fd != nil {
			fd.release()
		}
	}
}

// keptFds are the nodes holding a version descriptor, swept each
// keptIdle by a goroutine that runs while there are any. At most
// maxKeptFds: the descriptors are the daemon's, and the per-user file
// slots (internal/limits) do not count them, so a script reading many files
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
	var idle []*sharedFile
	for _, n := range nodes {
		n.f.mu.Lock()
		if n.rl.cached == 0 && now-n.rl.fdUsed >= int64(keptIdle) {
			idle = append(idle, n.takeReaderFd())
		}
		n.f.mu.Unlock()
	}
	releaseAll(idle)
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.nodes) == 0 {
		k.sweeping = false
		return false
	}
	return true
}
