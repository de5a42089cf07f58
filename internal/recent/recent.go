// Package recent remembers keys for a while, in a bounded set: rmwstate keeps
// there the (file, program) pairs seen holding a lock, so that it does
// not read their descriptors in /proc again at every commit.
package recent

import (
	"sync"
	"time"
)

// Set is a set of keys, each remembered for Keep after it was added; at
// Max keys it starts afresh. Keep and Max are set before use.
type Set[K comparable] struct {
	Keep time.Duration
	Max  int

	mu   sync.Mutex
	seen map[K]time.Time
}

// Has reports whether k was added less than Keep before now.
func (l *Set[K]) Has(k K, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.seen[k]
	return ok && now.Sub(at) < l.Keep
}

// Add remembers k as added at now.
func (l *Set[K]) Add(k K, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil || len(l.seen) >= l.Max {
		l.seen = map[K]time.Time{}
	}
	l.seen[k] = now
}
