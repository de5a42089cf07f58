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
	seen map[readKey]time.Time
}

type readKey struct {
	key uint64
	pid int32
}

// maxReads bounds the table; past it, entries older than keep go.
const maxReads = 4096

// NewReads remembers reads for keep.
func NewReads(keep time.Duration) *Reads {
	return &Reads{keep: keep, seen: map[readKey]time.Time{}}
}

// Note records that pid read key now.
func (r *Reads) Note(key uint64, pid int32) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.seen) >= maxReads {
		r.pruneLocked(now)
	}
	if len(r.seen) < maxReads {
		r.seen[readKey{key, pid}] = now
	}
}

// Read reports whether pid read key within keep.
func (r *Reads) Read(key uint64, pid int32) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.seen[readKey{key, pid}]
	return ok && time.Since(at) <= r.keep
}

// pruneLocked drops entries older than keep, or all of them when every
// entry is recent (a flood of readers): a missed read only delays
// learning.
func (r *Reads) pruneLocked(now time.Time) {
	for k, at := range r.seen {
		if now.Sub(at) > r.keep {
			delete(r.seen, k)
		}
	}
	if len(r.seen) >= maxReads {
		clear(r.seen)
	}
}
