package fs

import (
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
	"github.com/safefs/safefs/journal"
)

// name is one directory entry of a logical file.
type name struct {
	dir  *Node
	name string
}

// file is a logical file: what a path names across commits. Its inode
// number never changes; key follows the committed backing version.
type file struct {
	ino  uint64
	kind uint32 // S_IFMT bits
	// lockedOnce: a script lock was asked for on it through the mount
	// (then its readers' closes come to the daemon: noFlush).
	lockedOnce atomic.Bool
	// raw: served in place, without staging (rawfile.go); rw: its state.
	raw atomic.Bool
	// gen tells this file's kernel inode from another's with the same
	// number (see ids.newLocked).
	gen uint64

	mu    sync.Mutex
	key   key
	names nameSet
	// ghost: O_PATH fd of the version that lost its last name through
	// the mount (unlink, rename over it), so that an open the kernel
	// resolved before that still opens it, and a symlink it resolved
	// still reads, as on a plain file system.
	ghost int
	// pin: O_PATH fd of the committed version (key) while f has open
	// handles, so that its backing inode number cannot be freed and
	// reused by another file while anything can act on f (pin.go).
	pin     int
	handles map[*handle]struct{}
	version uint64 // bumped by every commit
	opened  uint64 // handles opened so far, for handle.seq
	// cachedUntil: the kernel may hold f's attributes until then (ns).
	cachedUntil int64
	// syncs groups the fsyncs of a directory by concurrent commits;
	// made at the first, only for directories.
	syncs *journal.GroupSync
	pt    ptFile // passthrough (passthrough.go)
	roles roles  // kernel nodes by role (roles.go)
	rw    rawFile
	// inPlace is held to write buffered bytes into the committed file
	// (appendbuf.go), and to read or stat it through the mount: so a
	// reader sees all of them or none.
	inPlace sync.RWMutex
}

// syncDir fsyncs the directory f through fd, or waits for an fsync of it
// that started after the caller's rename, which serves as well.
func (f *file) syncDir(fd int) error {
	f.mu.Lock()
	if f.syncs == nil {
		f.syncs = new(journal.GroupSync)
	}
	g := f.syncs
	f.mu.Unlock()
	return g.Do(func() error { return unix.Fsync(fd) })
}

// identity is the file's node identity in go-fuse: its number, kind
// and generation (so a reused number never finds an older file's node).
func (f *file) identity() gofs.StableAttr {
	return gofs.StableAttr{Mode: f.kind, Ino: f.ino, Gen: f.gen}
}

func newFile(ino uint64, kind uint32, k key) *file {
	return &file{ino: ino, kind: kind, key: k, ghost: -1, pin: -1}
}

// addName names f n in dir; it reports whether f had not that name.
func (f *file) addName(dir *Node, n string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.names.add(name{dir, n})
}

func (f *file) dropName(dir *Node, n string) {
	f.mu.Lock()
	f.names.drop(name{dir, n})
	f.mu.Unlock()
}

// anyName returns one name of f, and false when f has none left.
func (f *file) anyName() (name, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.names) == 0 {
		return name{}, false
	}
	return f.names[0], true
}

// nameList returns all names of f.
func (f *file) nameList() []name {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.names)
}

func (f *file) addHandle(h *handle) {
	f.mu.Lock()
	f.opened++
	h.seq = f.opened
	if f.handles == nil {
		f.handles = map[*handle]struct{}{}
	}
	f.handles[h] = struct{}{}
	if f.pin < 0 && h.first != nil {
		f.pin = pathIfKey(int(h.first.Fd()), f.key)
	}
	f.mu.Unlock()
}

// dropHandle drops the map with the last handle: a map keeps its size,
// and most of the files the kernel remembers are not open.
func (f *file) dropHandle(h *handle) {
	f.mu.Lock()
	delete(f.handles, h)
	if len(f.handles) == 0 {
		f.handles = nil
		closeFd(f.pin)
		f.pin = -1
	}
	f.mu.Unlock()
}

// lostName keeps ghost (or closes it) after f lost a name.
func (f *file) lostName(ghost int) {
	f.mu.Lock()
	named := len(f.names) > 0
	f.mu.Unlock()
	if named || ghost < 0 {
		closeFd(ghost)
		return
	}
	f.keepGhost(ghost)
}

// keepGhost keeps fd (O_PATH, of f's current version) as f's ghost.
func (f *file) keepGhost(fd int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ghost >= 0 {
		unix.Close(f.ghost)
	}
	f.ghost = fd
}

// openGhost opens the version f had when it lost its last name.
func (f *file) openGhost(flags int) (*os.File, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ghost < 0 {
		return nil, syscall.ENOENT
	}
	fd, err := backing.ReopenFd(f.ghost, flags)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "ghost"), nil
}

func (f *file) statGhost() (unix.Stat_t, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ghost < 0 {
		return unix.Stat_t{}, syscall.ENOENT
	}
	return backing.Fstat(f.ghost)
}

func (f *file) dropGhost() { f.keepGhost(-1) }

// handleList returns f's open handles.
func (f *file) handleList() []*handle {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*handle, 0, len(f.handles))
	for h := range f.handles {
		out = append(out, h)
	}
	return out
}

// statOpen describes a file that has no name left through one of its
// open handles, the best ranked first (a writer with pending changes):
// that is what reads of the unlinked file return.
func (f *file) statOpen() (unix.Stat_t, bool) {
	for _, h := range f.ranked(0, 0) {
		if st, err := h.stat(); err == nil {
			return st, true
		}
	}
	return unix.Stat_t{}, false
}

// callerHandle picks the handle a stat or fstat from thread tid of
// process tgid most likely means, as the kernel does not say which
// descriptor. nil if the process has none: the stat then describes the
// committed version.
func (f *file) callerHandle(tid, tgid uint32) *handle {
	if tgid == 0 {
		return nil
	}
	if hs := f.ranked(tid, tgid); len(hs) > 0 {
		return hs[0]
	}
	return nil
}

// ranked returns f's handles opened by process tgid (0: all), most
// likely meant first: one thread tid opened, then the best ranked
// (handle.rank), then the latest opened.
func (f *file) ranked(tid, tgid uint32) []*handle {
	type scored struct {
		h     *handle
		score [3]uint64
	}
	var hs []scored
	for _, h := range f.handleList() {
		if tgid != 0 && h.tgid != tgid {
			continue
		}
		s := scored{h, [3]uint64{0, uint64(h.rank()), h.seq}}
		if tid != 0 && h.tid == tid {
			s.score[0] = 1
		}
		hs = append(hs, s)
	}
	slices.SortFunc(hs, func(a, b scored) int { return slices.Compare(b.score[:], a.score[:]) })
	out := make([]*handle, len(hs))
	for i, s := range hs {
		out[i] = s.h
	}
	return out
}

func (f *file) hasHandles() bool { return f.handleCount() > 0 }

func (f *file) handleCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.handles)
}

// named reports whether f, found in the tables by backing identity k,
// may be the file now at dir/nm: f already has that name, or holds its
// version k alive (pinned: then k is f's inode, and dir/nm a link made
// in BACKING), or still has another name that leads to k (a hard link).
// A file without a name, or whose names lead elsewhere, had its inode
// freed: k is a reused number, another file. Names that no longer lead
// to k are dropped.
func (f *file) named(dir *Node, nm string, k key) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.names.has(name{dir, nm}) || f.pinned() {
		return true
	}
	f.names.dropIf(func(o name) bool { return !o.leadsTo(k) })
	return len(f.names) > 0
}

// leadsTo reports whether the name still names backing inode k.
func (o name) leadsTo(k key) bool {
	var st unix.Stat_t
	err := o.withDir(func(fd int) (err error) {
		st, err = backing.StatAt(fd, o.name)
		return err
	})
	return err == nil && keyOf(&st) == k
}
