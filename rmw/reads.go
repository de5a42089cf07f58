package rmw

import (
	"sync"
	"time"
)

// Reads remembers, for a short while, which process read which file, so
// that its later open for writing can be told a read-modify-write.
type Reads struct {
	mu   sync.Mutex
	keep time.Duration
	seen map[uint64]map[int32]time.Time // key, then pid
	n    int                            // entries in seen
}

// maxReads bounds the table; past it, entries older than keep go.
const maxReads = 4096

// NewReads remembers reads for keep.
func NewReads(keep time.Duration) *Reads {
	return &Reads{keep: keep, seen: map[uint64]map[int32]time.Time{}}
}

// Note records that pid read key now.
func (r *Reads) Note(key uint64, pid int32) {
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
		m = map[int32]time.Time{}
		r.seen[key] = m
	}
	if _, ok := m[pid]; !ok {
		r.n++
	}
	m[pid] = now
}

// Read reports whether pid read key within keep.
func (r *Reads) Read(key uint64, pid int32) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.seen[key][pid]
	return ok && time.Since(at) <= r.keep
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
		for pid, at := range m {
			if now.Sub(at) > r.keep {
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
