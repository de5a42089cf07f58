package fs

import (
	"sync"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/proc"
)

// Unlock publishes. On a local file system a script's written bytes are
// in the file when it releases its lock, so the next holder reads them;
// here they are pending until a commit. A script that unlocks before it
// closes (the PHP manual's flock example, flock(F, LOCK_UN) in Perl,
// lockf(F_ULOCK)) would hand the next holder the old version. So a
// release (or downgrade) of a script lock first commits, as fsync
// would, the pending changes of the descriptor it is made through and
// of every descriptor the releasing process opened for writing, on any
// file: scripts often lock a separate lock file and rewrite the data
// file under it (docs/design.md, "Locks").

// writerSet indexes open writers by the process that opened them.
type writerSet struct {
	mu sync.Mutex
	by map[uint32]map[*handle]struct{}
}

func (s *writerSet) add(h *handle) {
	if !h.write || h.tgid == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.by == nil {
		s.by = map[uint32]map[*handle]struct{}{}
	}
	if s.by[h.tgid] == nil {
		s.by[h.tgid] = map[*handle]struct{}{}
	}
	s.by[h.tgid][h] = struct{}{}
}

func (s *writerSet) drop(h *handle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	hs := s.by[h.tgid]
	delete(hs, h)
	if len(hs) == 0 {
		delete(s.by, h.tgid)
	}
}

// of returns the writers process tgid opened.
func (s *writerSet) of(tgid uint32) []*handle {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*handle, 0, len(s.by[tgid]))
	for h := range s.by[tgid] {
		out = append(out, h)
	}
	return out
}

// publishBeforeUnlock commits what the release of a lock by thread pid must
// make visible: fh's pending changes and those of the caller's process.
// A process killed by a signal publishes nothing (killed writers do not
// commit). It returns the first failure; each failed handle also keeps
// it for its close (unlockErr), since scripts check close more often
// than unlock.
func (r *root) publishBeforeUnlock(pid uint32, fh gofs.FileHandle) error {
	if r.opts.KillCheck && proc.KilledBySignal(pid) {
		return nil
	}
	tgid := proc.Tgid(pid)
	var hs []*handle
	if tgid != 0 {
		hs = r.openWriters.of(tgid)
	}
	if h, ok := fh.(*handle); ok && h.write && h.tgid != tgid {
		hs = append(hs, h) // an inherited descriptor, unlocked by a child
	}
	var first error
	for _, h := range hs {
		if err := h.publish(pid); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// publish commits h's pending changes for an unlock by thread pid, as
// fsync does. Only the open's O_TRUNC is not published: the content
// comes with a later write or close, and publishing an empty file would
// break the atomic replace that shell redirections rely on.
func (h *handle) publish(pid uint32) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.private {
		return nil
	}
	h.ptWrote()
	if h.p.state != modified || h.p.killed {
		return nil
	}
	h.closer = pid
	defer func() { h.closer = 0 }()
	err := h.ptCommit(false)
	if err != nil {
		h.unlockErr = err
		h.n.r.log.Warn("commit at unlock failed", zap.String("path", logPath(h.n.path())), zap.Error(err))
		return err
	}
	h.n.r.count.unlockCommits.Add(1)
	h.settle()
	return nil
}

// takeUnlockErr returns, once, the failure of a commit made at an
// unlock, for the descriptor's close to report. h.mu is held.
func (h *handle) takeUnlockErr() error {
	err := h.unlockErr
	h.unlockErr = nil
	return err
}

// afterGrant makes what a lock holder reads what the last holder wrote.
// On a local file system a script that opens a file, then locks it and
// reads, reads the previous holder's bytes however long ago it opened.
// Here a reader keeps the version it opened, and in a cluster this
// daemon learns of another daemon's commit only when it looks at the
// name. So a grant through fh (by thread pid) first learns, in a
// cluster, the versions other daemons published of fh's file and of the
// files the holder's process has open for writing (a writer that has
// not written yet then follows by itself: refresh), and moves a reader
// granted a lock to the latest version (followLatest).
func (r *root) afterGrant(pid uint32, fh gofs.FileHandle) {
	h, ok := fh.(*handle)
	if r.clustered() {
		if ok {
			h.n.learnPublished()
		}
		if tgid := proc.Tgid(pid); tgid != 0 {
			for _, w := range r.openWriters.of(tgid) {
				w.n.learnPublished()
			}
		}
	}
	if ok && !h.write {
		h.followLatest()
	}
}

// learnPublished adopts a version another daemon of the cluster
// published at one of n's names (statNamed does, through
// adoptPublished), so that f.version counts it.
func (n *Node) learnPublished() {
	if n.f.kind == unix.S_IFREG {
		_, _ = n.statNamed()
	}
}

// followLatest moves a reader to the latest committed version. Only a
// reader the daemon serves can move: one reading through its version's
// page cache or backing file (passthrough) cannot, which is why the
// readers of a file locked once are served by the daemon (openFlags).
func (h *handle) followLatest() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.cached || h.pt || h.mapped.Load() || h.raw {
		return
	}
	ver := h.n.f.ver()
	if ver == h.baseVer {
		return
	}
	fd, err := h.n.openCurrent(unix.O_RDONLY)
	if err != nil {
		return // unlinked or replaced in BACKING: it keeps what it has
	}
	old := h.base
	h.n.f.mu.Lock() // quiet reads a reader's baseVer under it
	h.base, h.baseVer = fd, ver
	h.n.f.mu.Unlock()
	if old != h.first {
		old.Close()
	}
}
