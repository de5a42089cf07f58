package fs

import (
	"context"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// The daemon spends its own descriptors and disk on behalf of callers
// who may not have them: one user must not exhaust them for everyone.

const (
	fdsPerHandle = 3    // the version opened, the latest one, the staging file
	fdReserve    = 1024 // kept for root's callers, directories, the journal
	// spaceReserve is kept free beyond what unprivileged users may use,
	// so the journal can always finish the commits in progress.
	spaceReserve = 1 << 20
)

// fileSlots caps the handles of non-root callers, per uid (EMFILE) and
// in all (ENFILE); root's callers are never refused.
type fileSlots struct {
	perUser, total int

	mu    sync.Mutex
	byUID map[uint32]int
	all   int
}

// newFileSlots sizes the caps from the daemon's descriptor limit: one
// uid may hold about half of what is left after the reserve.
func newFileSlots(perUser int) *fileSlots {
	var lim unix.Rlimit
	n := 1024
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil && lim.Cur < 1<<31 {
		n = int(lim.Cur)
	}
	total := max((n-fdReserve)/fdsPerHandle, 16)
	if perUser <= 0 {
		perUser = max(total/2, 8)
	}
	return &fileSlots{perUser: perUser, total: total, byUID: map[uint32]int{}}
}

func (s *fileSlots) take(uid uint32) error {
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

func (s *fileSlots) give(uid uint32) {
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

// takeFile reserves a handle for the caller of ctx; the handle made with
// it gives it back at release.
func (r *root) takeFile(ctx context.Context) error {
	err := r.files.take(callerUID(ctx))
	if err != nil {
		r.count.tooManyFiles.Add(1)
	}
	return err
}

// callerTid is the thread a request came from (0 if unknown).
func callerTid(ctx context.Context) uint32 {
	if c, ok := fuse.FromContext(ctx); ok {
		return c.Pid &^ noFh
	}
	return 0
}

func callerUID(ctx context.Context) uint32 {
	if c, ok := fuse.FromContext(ctx); ok {
		return c.Uid
	}
	return 0
}

// roomFor refuses (ENOSPC) n more bytes for a non-root user beyond what
// the file system gives unprivileged users (statfs f_bavail): the
// daemon writes as root, and would otherwise eat root's reserved blocks.
func (r *root) roomFor(uid uint32, n int64) error {
	if uid == 0 || n <= 0 || r.space.take(n) {
		return nil
	}
	var s unix.Statfs_t
	if err := unix.Fstatfs(r.rootfd, &s); err != nil {
		return err
	}
	left := int64(s.Bavail)*s.Bsize - spaceReserve
	if n > left {
		r.count.noSpace.Add(1)
		return syscall.ENOSPC
	}
	r.space.set(left-n, s.Bsize)
	return nil
}

// metaCost is what roomForMeta counts for a change of metadata: a block
// of the largest usual size (a new directory's first block, a directory
// grown by one, a long symlink's target, an xattr block).
const metaCost = 4 << 10

// roomForMeta refuses (ENOSPC) a non-root caller a change of metadata
// that may take a block, plus n bytes of its own (a symlink's target, an
// xattr), at the bound of its data writes: the daemon makes entries and
// sets xattrs as root, and would otherwise fill root's reserved blocks
// with directories or xattrs once data writes were refused. Rename too:
// a rename into a full directory block takes a new one.
func (r *root) roomForMeta(ctx context.Context, n int) error {
	return r.roomFor(callerUID(ctx), metaCost+int64(n))
}

// spaceTTL is how long a statfs answer serves roomFor: a statfs per
// write was one system call in twenty of a small commit.
const spaceTTL = 100 * time.Millisecond

// spaceCache is the room unprivileged users had at the last statfs, less
// what roomFor granted since, each grant counted as the blocks it may
// take (rounded up, plus one for metadata). It only grants: a request it
// cannot cover asks statfs again, so a refusal is decided on a fresh
// answer.
type spaceCache struct {
	mu    sync.Mutex
	at    time.Time
	left  int64
	block int64
}

func (c *spaceCache) take(n int64) bool {
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

func (c *spaceCache) set(left, block int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at, c.left, c.block = time.Now(), left, block
}
