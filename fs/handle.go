package fs

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"
)

// handle is one open file. A reader reads the version it opened. A
// writer reads the latest committed version until its first write, then
// works on its pending version (p), which a commit publishes whole.
type handle struct {
	n *Node

	mu       sync.Mutex
	write    bool
	uid, gid uint32 // the opener, for set-id handling at commit
	tid      uint32 // the opener's thread
	tgid     uint32 // the opener's process, 0 if unknown
	seq      uint64 // order of opening among the file's handles

	first   *os.File    // the version opened at open; kept until release
	shared  *sharedFile // first is this node's version descriptor, not the handle's own
	base    *os.File    // committed version: what reads see without staging
	baseVer uint64      // f.version when base was opened
	p       pending     // the pending version (pending.go), under mu
	flushed atomic.Bool // closed once and not used since: likely not what a stat means
	// noFlush: a reader whose closes the kernel does not send (FOPEN_NOFLUSH).
	noFlush atomic.Bool
	// wrote: a write(2) reached this handle since its open or settle, so
	// the kernel has dropped the attributes it cached before (uncache).
	wrote   bool
	closer  uint32 // the thread whose close() is committing, 0 if none
	closed  bool   // released: base and first are gone
	private bool   // an O_TMPFILE file not linked yet: writes go to base
	cached  bool   // reads through its node's page cache (roles.go)
	// verKey: a reader's version, its backing inode (readerMixes).
	verKey key
	obs    *commitObs // the commit in progress, with an Observer
	// pendingSeen: the pending size at the last look of Server.Gauges.
	pendingSeen atomic.Int64
	// mapped: a shared map of this handle has faulted pages in (see
	// mappedSize); seen: the size this handle last showed, for a map.
	mapped atomic.Bool
	seen   atomic.Int64
	rmw    rmwHandle
	pt     bool // opened with the file's backing ID (passthrough.go)
	ptNode bool // opened with its node's backing ID (roles_pt.go)
	// ptWrite: the kernel writes into stage (ptwrite.go); ptSeen: how
	// stage looked when the daemon last took its writes in.
	ptWrite bool
	ptSeen  ptMark
	// settled: 1 + the committed version this writer shows while it has
	// nothing pending, 0 if none (settle).
	settled atomic.Uint64
	wb      writeBehind
	// unlockErr: a commit made at an unlock, or a publish of an
	// appender's lines, failed; the next close reports it (unlock.go).
	unlockErr error
	// modeDropped: the commit in progress drops set-id bits (keptMode),
	// which the kernel cannot know: its cached attributes must go.
	modeDropped bool
	pub         appendPub // publishing an appender's lines (appendpub.go)
	// raw: base is the raw file's backing inode, read and written in
	// place (rawfile.go); rawPt: opened with the file's raw backing ID;
	// rawCached: reads through its node's page cache.
	raw, rawPt, rawCached bool
}

var (
	_ gofs.FileReader    = (*handle)(nil)
	_ gofs.FileWriter    = (*handle)(nil)
	_ gofs.FileFlusher   = (*handle)(nil)
	_ gofs.FileFsyncer   = (*handle)(nil)
	_ gofs.FileReleaser  = (*handle)(nil)
	_ gofs.FileAllocater = (*handle)(nil)
	_ gofs.FileLseeker   = (*handle)(nil)
)

func (h *handle) errno(err error) syscall.Errno { return h.n.errno(err) }

// refresh reopens base when a commit published a newer version and this
// handle has no pending version of its own: a writer that has not
// written yet reads the latest committed version.
func (h *handle) refresh() error {
	f := h.n.f
	f.mu.Lock()
	ver := f.version
	f.mu.Unlock()
	// An appender's pending bytes do not depend on base: it follows too.
	// A raw handle's base is the file's one inode.
	if h.raw || !h.write || (h.p.stage != nil && !h.p.appends()) || ver == h.baseVer {
		return nil
	}
	fd, err := h.n.openCurrent(h.baseFlags())
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ESTALE) {
		// Unlinked, or replaced directly in BACKING: the version this
		// handle has is the latest one it can have.
		return nil
	}
	if err != nil {
		return err
	}
	h.setBase(fd, ver)
	return nil
}

func (h *handle) baseFlags() int {
	if h.write {
		return unix.O_RDWR
	}
	return unix.O_RDONLY
}

// rank orders a process's handles by how likely its fstat means them:
// one with pending changes, then one in use, then one closed once.
func (h *handle) rank() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.p.stage != nil, h.p.newFile:
		return 2
	case h.flushed.Load():
		return 0
	}
	return 1
}

// setBase replaces base, closing the old one unless it is first.
func (h *handle) setBase(f *os.File, ver uint64) {
	if h.base != h.first {
		h.base.Close()
	}
	h.base, h.baseVer = f, ver
}
