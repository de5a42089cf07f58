// Package estale remembers the opens answered ESTALE so that their
// retry passes: the kernel retries such an open once and fails the
// system call if the retry is answered ESTALE too.
package estale

import (
	"sync"
	"time"
)

// Refusals remembers the threads whose last OPEN was answered ESTALE.
// The kernel retries such an open once (do_filp_open, LOOKUP_REVAL) and
// fails the system call if the retry is answered ESTALE too, so the
// thread's next OPEN is let through whatever its node: the routing of
// fs's roles.go usually brings it to a node made for it, but a retry that
// comes late (a loaded machine) or finds its logical file forgotten
// meets other openers. Kept at the root, not in the file, for that
// reason.
type Refusals struct {
	mu sync.Mutex
	at map[uint32]int64 // tid → when refused (ns)
}

// refusalLife bounds how long a refusal waits for its retry: one that
// never comes (the name vanished, the thread died) is forgotten then.
const refusalLife = 10 * time.Second

// Note records that thread tid's open was just answered ESTALE.
func (r *Refusals) Note(tid uint32) {
	if tid == 0 {
		return
	}
	now := time.Now().UnixNano()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at == nil {
		r.at = map[uint32]int64{}
	}
	for t, at := range r.at {
		if now-at >= int64(refusalLife) {
			delete(r.at, t)
		}
	}
	r.at[tid] = now
}

// Take reports whether thread tid's open is the retry of a refused one,
// and ends that refusal.
func (r *Refusals) Take(tid uint32) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.at[tid]
	if !ok {
		return false
	}
	delete(r.at, tid)
	return time.Now().UnixNano()-at < int64(refusalLife)
}
