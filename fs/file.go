package fs

import (
	"sync"

	"golang.org/x/sys/unix"
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

	mu      sync.Mutex
	key     key
	names   map[name]struct{}
	handles map[*handle]struct{}
	version uint64 // bumped by every commit
}

func newFile(ino uint64, kind uint32, k key) *file {
	return &file{ino: ino, kind: kind, key: k, names: map[name]struct{}{}, handles: map[*handle]struct{}{}}
}

func (f *file) addName(dir *Node, n string) {
	f.mu.Lock()
	f.names[name{dir, n}] = struct{}{}
	f.mu.Unlock()
}

func (f *file) dropName(dir *Node, n string) {
	f.mu.Lock()
	delete(f.names, name{dir, n})
	f.mu.Unlock()
}

// anyName returns one name of f, and false when f has none left.
func (f *file) anyName() (name, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for n := range f.names {
		return n, true
	}
	return name{}, false
}

// nameList returns all names of f.
func (f *file) nameList() []name {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]name, 0, len(f.names))
	for n := range f.names {
		out = append(out, n)
	}
	return out
}

func (f *file) addHandle(h *handle) {
	f.mu.Lock()
	f.handles[h] = struct{}{}
	f.mu.Unlock()
}

func (f *file) dropHandle(h *handle) {
	f.mu.Lock()
	delete(f.handles, h)
	f.mu.Unlock()
}

// statOpen stats the version some open handle opened, for a file that
// has no name left. It holds f.mu so the handle cannot close meanwhile.
func (f *file) statOpen() (unix.Stat_t, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for h := range f.handles {
		st, err := fstat(int(h.first.Fd()))
		return st, err == nil
	}
	return unix.Stat_t{}, false
}

// named reports whether f may be the file now at dir/nm, whose backing
// identity is k: f already has that name, still has another name that
// leads to k (a hard link), has no name yet, or is open. Names that no
// longer lead to k are dropped.
func (f *file) named(dir *Node, nm string, k key) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.names[name{dir, nm}]; ok || len(f.names) == 0 || len(f.handles) > 0 {
		return true
	}
	for o := range f.names {
		if !o.leadsTo(k) {
			delete(f.names, o)
		}
	}
	return len(f.names) > 0
}

// leadsTo reports whether the name still names backing inode k.
func (o name) leadsTo(k key) bool {
	fd, err := o.dir.dirFd()
	if err != nil {
		return false
	}
	st, err := statAt(fd, o.name)
	return err == nil && keyOf(&st) == k
}
