package rmw

import (
	"sync"
	"time"
)

// Reads remembers, for a short while, which thread read which file, and
// the reader's parent process when the caller knew it, so that a later
// write by that thread, or by its parent, can be told a
// read-modify-write. A Reads also serves to remember writes.
type Reads struct {
	mu   sync.Mutex
	keep time.Duration
	seen map[uint64]map[int32]read // key, then thread
	n    int                       // entries in seen
}

type read struct {
	at     time.Time
	parent int32 // the reader's parent process, 0 if not known
}

// maxReads bounds the table; past it, entries older than keep go.
const maxReads = 4096

// NewReads remembers reads for keep.
func NewReads(keep time.Duration) *Reads {
	return &Reads{keep: keep, seen: map[uint64]map[int32]read{}}
}

// Note records that pid read key now.
func (r *Reads) Note(key uint64, pid int32) { r.NoteChild(key, pid, 0) }

// NoteChild records that pid, a child of process parent, read key now.
func (r *Reads) NoteChild(key uint64, pid, parent int32) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n >= maxReads {
		r.pruneLocked(now)
	}
	if r.n >= maxReads {
		return
	}
	m := r.seen[key]
	if m == nil {
		m = map[int32]read{}
		r.seen[key] = m
	}
	if _, ok := m[pid]; !ok {
		r.n++
	}
	m[pid] = read{now, parent}
}

// Read reports whether pid read key within keep.
func (r *Reads) Read(key uint64, pid int32) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.seen[key][pid]
	return ok && time.Since(e.at) <= r.keep
}

// ChildRead returns the thread that last read key within keep among the
// children of process parent (noted by NoteChild); 0 if none.
func (r *Reads) ChildRead(key uint64, parent int32) int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var last read
	tid := int32(0)
	for pid, e := range r.seen[key] {
		if e.parent == parent && parent != 0 && time.Since(e.at) <= r.keep && e.at.After(last.at) {
			tid, last = pid, e
		}
	}
	return tid
}

// Forget drops the reads of key: the file is gone, and its number may
// name another file next, whose first write is no read-modify-write.
func (r *Reads) Forget(key uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n -= len(r.seen[key])
	delete(r.seen, key)
}

// pruneLocked drops entries older than keep, or all of them when every
// entry is recent (a flood of readers): a missed read only delays
// learning.
func (r *Reads) pruneLocked(now time.Time) {
	for key, m := range r.seen {
		for pid, e := range m {
			if now.Sub(e.at) > r.keep {
				delete(m, pid)
				r.n--
			}
		}
		if len(m) == 0 {
			delete(r.seen, key)
		}
	}
	if r.n >= maxReads {
		clear(r.seen)
		r.n = 0
	}
}
