package fs

import (
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"
)

// attrTTL is how long the kernel may keep a file's attributes while
// every process sees the same ones: as go-fuse's loopback and libfuse
// do, so that a change made directly in BACKING shows within it.
const attrTTL = time.Second

// One kernel inode serves every version of a file and every process's
// view of it (a writer sees its pending size), and the kernel caches
// attributes per inode, not per process. So they are cached only while
// all views agree: no handle open for writing, and every reader on the
// committed version. Otherwise each stat asks the daemon (TTL 0), which
// answers for the caller (callerHandle). Treating a writer that has not
// written yet as agreeing (it sees the committed version) saves two
// round trips per `open >>`; it was tried and kept out while a gdbm_open
// failure under concurrency is not understood (README).

// quiet reports whether every process sees f's committed attributes.
// f.mu is held.
func (f *file) quiet() bool {
	for h := range f.handles {
		// write is fixed at open, and a reader's baseVer too.
		if h.write || h.baseVer != f.version {
			return false
		}
	}
	return true
}

// attrTimeout is the TTL for attributes of f read at version ver. The
// check and the record of a TTL given are one step under f.mu: a writer
// opening or a commit landing after it sees the record and uncaches.
func (f *file) attrTimeout(ver uint64) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.kind == unix.S_IFREG && (f.version != ver || !f.quiet()) {
		return 0
	}
	f.cachedUntil = max(f.cachedUntil, time.Now().Add(attrTTL).UnixNano())
	return attrTTL
}

// uncache makes the kernel drop f's cached attributes (not its pages:
// every open is direct I/O, and a new shared map drops them itself),
// when it may hold some. Called at each commit, which the kernel does
// not see. A writer's open needs none: until it commits, what others
// have cached is still the committed version, and the kernel drops the
// writer's own view itself at each write and truncation.
func (f *file) uncache(in *gofs.Inode) {
	f.mu.Lock()
	held := f.cachedUntil > time.Now().UnixNano()
	f.mu.Unlock()
	if held {
		// ENOENT: the kernel has forgotten the inode, nothing to drop.
		_ = in.NotifyContent(-1, 0)
	}
}

// commitEpoch is taken before a lookup stats a name whose file it does
// not know yet; stable reports whether no commit ran since, so that
// the stat describes a committed version.
type commitEpoch uint64

func (r *root) commitEpoch() (commitEpoch, bool) {
	b := r.commitsBegun.Load()
	return commitEpoch(b), r.commitsEnded.Load() == b
}

func (r *root) stable(e commitEpoch, idle bool) bool {
	return idle && r.commitsBegun.Load() == uint64(e)
}

// The kernel keeps one size for the inode and cuts its page cache to
// any smaller size a reply gives: that drops a writer's dirty mapped
// pages past the committed size (lost at its commit), and makes a
// reader's map of a longer older version fault (SIGBUS). So while
// handles with shared maps are open, no reply gives less than the
// largest size one of them shows. Other processes then see that size,
// not their own view, until the maps' descriptors are released.

// noteSize records the size a mapped handle shows after a change (h.mu
// is held); only mapped handles' sizes are read (mappedSize).
func (h *handle) noteSize() {
	if h.mapped.Load() {
		_, _ = h.statLocked() // records it (seen)
	}
}

// mappedSize is the largest size a handle of f with a shared map shows,
// 0 if none; it never waits for a handle busy in a commit.
func (f *file) mappedSize() int64 {
	f.mu.Lock() // every stat asks: no copy of the handle list
	defer f.mu.Unlock()
	var size int64
	for h := range f.handles {
		if h.mapped.Load() {
			size = max(size, h.seen.Load())
		}
	}
	return size
}
