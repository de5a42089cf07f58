// Package limits keeps one user from spending, through the daemon, the
// descriptors and disk space every user needs: the daemon opens files
// and writes as root on behalf of callers who may not have either.
package limits

import (
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	fdsPerHandle = 3    // the version opened, the latest one, the staging file
	fdReserve    = 1024 // kept for root's callers, directories, the journal
)

// Files caps the handles of non-root callers, per uid (EMFILE) and
// in all (ENFILE); root's callers are never refused.
type Files struct {
	perUser, total int

	mu    sync.Mutex
	byUID map[uint32]int
	all   int
}

// NewFiles sizes the caps from the daemon's descriptor limit: one
// uid may hold about half of what is left after the reserve.
func NewFiles(perUser int) *Files {
	var lim unix.Rlimit
	n := 1024
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil && lim.Cur < 1<<31 {
		n = int(lim.Cur)
	}
	total := max((n-fdReserve)/fdsPerHandle, 16)
	if perUser <= 0 {
		perUser = max(total/2, 8)
	}
	return &Files{perUser: perUser, total: total, byUID: map[uint32]int{}}
}

// Take reserves a handle for uid: EMFILE past its share, ENFILE past
// all users'.
func (s *Files) Take(uid uint32) error {
	if uid == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.byUID[uid] >= s.perUser:
		return syscall.EMFILE
	case s.all >= s.total:
		return syscall.ENFILE
	}
	s.byUID[uid]++
	s.all++
	return nil
}

// Give gives back a handle Take reserved.
func (s *Files) Give(uid uint32) {
	if uid == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byUID[uid]--; s.byUID[uid] <= 0 {
		delete(s.byUID, uid)
	}
	s.all--
}

// spaceTTL is how long a statfs answer serves roomFor: a statfs per
// write was one system call in twenty of a small commit.
const spaceTTL = 100 * time.Millisecond

// Space is the room unprivileged users had at the last statfs, less
// what roomFor granted since, each grant counted as the blocks it may
// take (rounded up, plus one for metadata). It only grants: a request it
// cannot cover asks statfs again, so a refusal is decided on a fresh
// answer.
type Space struct {
	mu    sync.Mutex
	at    time.Time
	left  int64
	block int64
}

// Take reports whether n more bytes fit in what the last Set left.
func (c *Space) Take(n int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.block <= 0 || time.Since(c.at) >= spaceTTL {
		return false
	}
	cost := (n/c.block + 2) * c.block
	if cost > c.left {
		return false
	}
	c.left -= cost
	return true
}

// Set records a statfs answer: left bytes for unprivileged users, in
// blocks of block bytes.
func (c *Space) Set(left, block int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at, c.left, c.block = time.Now(), left, block
}

// Kept is what the rejected/ directory holds, in all and per writing
// uid: the bytes of failed commits are kept there within its bounds, so
// that a flood of failures (by one user above all) cannot fill the disk.
type Kept struct {
	max, userMax int64

	mu    sync.Mutex
	all   int64
	byUID map[uint32]int64
	files int64 // found at mount plus kept since
}

// NewKept bounds rejected/ to max bytes in all, userMax per uid.
func NewKept(max, userMax int64) *Kept {
	return &Kept{max: max, userMax: userMax, byUID: map[uint32]int64{}}
}

// Take reserves cost bytes for uid, false if a bound would be passed (a
// negative cost gives bytes back).
func (k *Kept) Take(uid uint32, cost int64) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.all+cost > k.max || k.byUID[uid]+cost > k.userMax {
		return false
	}
	k.all += cost
	k.byUID[uid] += cost
	return true
}

// Found counts a file of cost bytes found at mount, kept for uid, bounds
// or not.
func (k *Kept) Found(uid uint32, cost int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.all += cost
	k.byUID[uid] += cost
	k.files++
}

// Kept counts a file kept (its bytes were taken).
func (k *Kept) Kept() {
	k.mu.Lock()
	k.files++
	k.mu.Unlock()
}

// Totals are the files and bytes counted.
func (k *Kept) Totals() (files, bytes int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.files, k.all
}
