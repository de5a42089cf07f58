package rmw

import (
	"sync"
	"time"
)

// Moves remembers, for a while, which file a rename put in another's
// place (from → to), and the path: an open the kernel sent to the
// replaced file (its name was resolved before the rename) must wait for
// the session of the file now at that path, not take one of its own.
type Moves struct {
	mu   sync.Mutex
	keep time.Duration
	m    map[uint64]move
}

type move struct {
	to   uint64
	path string
	at   time.Time
}

// maxMoves bounds the set; maxHops the chain Resolve follows.
const maxMoves, maxHops = 4096, 64

// NewMoves remembers renames for keep.
func NewMoves(keep time.Duration) *Moves { return &Moves{keep: keep, m: map[uint64]move{}} }

// Add records that to replaced from, at path.
func (ms *Moves) Add(from, to uint64, path string) {
	now := time.Now()
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if len(ms.m) >= maxMoves {
		for k, mv := range ms.m {
			if now.Sub(mv.at) > ms.keep {
				delete(ms.m, k)
			}
		}
		if len(ms.m) >= maxMoves {
			clear(ms.m)
		}
	}
	ms.m[from] = move{to, path, now}
	delete(ms.m, to) // to is at the path now: an older rename from it is void (numbers are reused)
}

// Resolve follows the renames from key within keep: the file now in its
// place and its path; key itself and "" when it was not replaced.
func (ms *Moves) Resolve(key uint64) (uint64, string) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	path := ""
	for range maxHops {
		mv, ok := ms.m[key]
		if !ok || time.Since(mv.at) > ms.keep {
			break
		}
		key, path = mv.to, mv.path
	}
	return key, path
}

// Forget drops the renames from and to key: the file is gone, and its
// number may name another file next.
func (ms *Moves) Forget(key uint64) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if len(ms.m) == 0 {
		return
	}
	delete(ms.m, key)
	for k, mv := range ms.m {
		if mv.to == key {
			delete(ms.m, k)
		}
	}
}
