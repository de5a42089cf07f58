package fs

import (
	"sync"

	"golang.org/x/sys/unix"
)

// key is the identity of one backing inode.
type key struct{ dev, ino uint64 }

func keyOf(st *unix.Stat_t) key { return key{uint64(st.Dev), st.Ino} }

// firstSynthetic starts the inode numbers safefs makes up when a backing
// inode number is already taken by another logical file (after a commit
// the logical file keeps its number while the backing number changes,
// and the old number can be reused by the backing file system).
const firstSynthetic = 1 << 62

// ids maps backing inodes to logical files. A logical file keeps one
// inode number, and so one kernel inode (page cache, flock and fcntl
// locks), across all its committed versions.
type ids struct {
	mu     sync.Mutex
	byKey  map[key]*file
	byIno  map[uint64]*file
	nextID uint64
	// nextGen numbers logical files. go-fuse finds a live node by its
	// whole StableAttr: with a generation of its own, a new file never
	// gets the node of an older one that had the same inode number (a
	// backing number reused while the old node's forget raced a lookup,
	// which left it out of the tables: every open of the name then
	// failed with ESTALE).
	nextGen uint64
}

func newIDs() *ids {
	return &ids{byKey: map[key]*file{}, byIno: map[uint64]*file{}, nextID: firstSynthetic}
}

// get returns the logical file for st, making one if it is new (made).
func (t *ids) get(st *unix.Stat_t) (f *file, made bool) {
	k := keyOf(st)
	kind := st.Mode & unix.S_IFMT
	t.mu.Lock()
	defer t.mu.Unlock()
	if f := t.byKey[k]; f != nil && f.kind == kind {
		return f, false
	}
	return t.newLocked(st), true
}

func (t *ids) newLocked(st *unix.Stat_t) *file {
	ino := st.Ino
	if _, taken := t.byIno[ino]; taken || ino <= 1 {
		ino = t.nextID
		t.nextID++
	}
	f := newFile(ino, st.Mode&unix.S_IFMT, keyOf(st))
	t.nextGen++
	f.gen = t.nextGen
	t.byKey[f.key] = f
	t.byIno[ino] = f
	return f
}

// newGen returns a generation no node had: a file's next kernel node
// (roles.go).
func (t *ids) newGen() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.nextGen++
	return t.nextGen
}

// fresh makes a new logical file for st, replacing whatever the tables
// held for its backing inode.
func (t *ids) fresh(st *unix.Stat_t) *file {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.newLocked(st)
}

// add registers f (made by the caller, e.g. the root).
func (t *ids) add(f *file) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.byKey[f.key] = f
	t.byIno[f.ino] = f
}

// rekey records that f's current version is now the backing inode k.
func (t *ids) rekey(f *file, k key) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byKey[f.key] == f {
		delete(t.byKey, f.key)
	}
	f.key = k
	t.byKey[k] = f
	t.byIno[f.ino] = f
}

// drop removes f from the tables (the kernel forgot it).
func (t *ids) drop(f *file) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byKey[f.key] == f {
		delete(t.byKey, f.key)
	}
	if t.byIno[f.ino] == f {
		delete(t.byIno, f.ino)
	}
}

// revive puts f back in the tables when a forget dropped it while a
// lookup was making it a node, unless another file took its backing
// inode or number meanwhile (f.mu held).
func (t *ids) revive(f *file) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byKey[f.key] == nil && t.byIno[f.ino] == nil {
		t.byKey[f.key] = f
		t.byIno[f.ino] = f
	}
}

// inoOf is the inode number a directory listing shows for a backing inode.
func (t *ids) inoOf(k key) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if f := t.byKey[k]; f != nil {
		return f.ino
	}
	return k.ino
}

// owns reports whether backing inode k is f: its committed version, or
// the one a commit in progress is putting in place.
func (t *ids) owns(f *file, k key) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return f.key == k || t.byKey[k] == f
}

// alias maps k to f too, before a commit renames k into f's place, so
// that a lookup racing the rename finds f under either inode.
func (t *ids) alias(f *file, k key) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.byKey[k] = f
}

// unalias undoes alias after a failed commit.
func (t *ids) unalias(f *file, k key) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byKey[k] == f && f.key != k {
		delete(t.byKey, k)
	}
}

// known reports whether backing inode k belongs to a logical file.
func (t *ids) known(k key) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byKey[k] != nil
}

// current returns the backing inode of f's committed version.
func (t *ids) current(f *file) key {
	t.mu.Lock()
	defer t.mu.Unlock()
	return f.key
}

// all returns every logical file in the tables.
func (t *ids) all() []*file {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*file, 0, len(t.byIno))
	for _, f := range t.byIno {
		out = append(out, f)
	}
	return out
}
