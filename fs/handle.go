package fs

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
	"github.com/safefs/safefs/internal/proc"
	"github.com/safefs/safefs/internal/staging"
)

// handle is one open file. A reader reads the version it opened. A
// writer reads the latest committed version until its first write, then
// works on a private staging copy that a commit publishes whole.
type handle struct {
	n *Node

	mu     sync.Mutex
	write  bool
	append bool // pending bytes are appends, placed at the end at commit
	// atEnd: an O_APPEND descriptor whose pending version became whole
	// (see unappend): its writes go to the end of that version.
	atEnd    bool
	uid, gid uint32 // the opener, for set-id handling at commit
	tid      uint32 // the opener's thread
	tgid     uint32 // the opener's process, 0 if unknown
	seq      uint64 // order of opening among the file's handles

	first   *os.File    // the version opened at open; kept until release
	shared  *sharedFile // first is this node's version descriptor, not the handle's own
	base    *os.File    // committed version: what reads see without staging
	baseVer uint64      // f.version when base was opened
	stage   *os.File    // pending version, nil when clean
	stageNm string
	buf     []byte // pending appends not in stage yet (appendbuf.go)
	// newFile: this handle's create made the file and its pending
	// version is buf, whole, with no staging file until something needs
	// one (appendbuf.go). made: the create was this handle's, and it has
	// not committed: without O_TRUNC, newFile starts at the first write
	// if no commit came since.
	newFile, made bool
	wroteAt       unix.Timespec // a new file's last buffered write: its mtime
	dirty         bool          // stage or buf holds changes no commit has published
	// killed: the last FLUSH came from a process killed by a signal, so
	// RELEASE must not commit what it left; a live close or write clears it.
	killed bool
	// truncOnly: the pending version is only the open's O_TRUNC, nothing
	// written yet. A shell's `cmd > file` closes such a descriptor after
	// moving it to stdout: that close must not publish an empty file.
	truncOnly bool
	flushed   atomic.Bool // closed once and not used since: likely not what a stat means
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
	// staged: 1 + the size of the pending version of a writer that is
	// not appending, 0 if none (kernelSize).
	staged atomic.Int64
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
	// place (raw.go); rawPt: opened with the file's raw backing ID;
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
	if h.raw || !h.write || (h.stage != nil && !h.append) || ver == h.baseVer {
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

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.flushed.Store(false)
	if h.raw {
		return h.rawRead(dest, off)
	}
	h.rmw.read = true
	if err := h.refresh(); err != nil {
		return nil, h.errno(err)
	}
	if fillsPages(ctx) && !h.mapped.Load() && !h.cached {
		h.mapped.Store(true)
		h.settled.Store(0)
		h.n.f.ptMapped()
		h.noteSize()
	}
	h.n.f.inPlace.RLock()
	n, err := h.pread(dest, off)
	h.n.f.inPlace.RUnlock()
	if err != nil {
		return nil, h.errno(err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

// pread reads what this handle sees: its pending version, or for an
// appender the committed file followed by its pending appends.
func (h *handle) pread(dest []byte, off int64) (int, error) {
	if err := h.spill(); err != nil {
		return 0, err
	}
	if h.stage == nil {
		return unix.Pread(int(h.base.Fd()), dest, off)
	}
	if !h.append {
		return unix.Pread(int(h.stage.Fd()), dest, off)
	}
	st, err := backing.Fstat(int(h.base.Fd()))
	if err != nil {
		return 0, err
	}
	if off >= st.Size {
		return unix.Pread(int(h.stage.Fd()), dest, off-st.Size)
	}
	n, err := unix.Pread(int(h.base.Fd()), dest[:min(int64(len(dest)), st.Size-off)], off)
	if err != nil || n < len(dest) && off+int64(n) < st.Size {
		return n, err
	}
	m, err := unix.Pread(int(h.stage.Fd()), dest[n:], 0)
	return n + max(m, 0), err
}

// copyUp gives the handle its staging file: a copy of the latest
// committed version, or empty for O_TRUNC and appends.
func (h *handle) copyUp(empty bool) error {
	if err := h.spill(); err != nil {
		return err
	}
	if h.stage != nil {
		return nil
	}
	if err := h.refresh(); err != nil {
		return err
	}
	if !empty {
		bs, err := backing.Fstat(int(h.base.Fd()))
		if err != nil {
			return err
		}
		// A file just created has nothing to copy (a create's first
		// write): skip the clone attempt and two truncations.
		empty = bs.Size == 0
		if err := h.n.r.roomFor(h.uid, bs.Blocks*512); err != nil {
			return err
		}
	}
	take := h.n.r.pool.Take
	if empty && h.append && !h.n.r.clustered() {
		// A cluster's recovery reads a cut-off append's staging file
		// by its name (journal settleAppend).
		take = h.n.r.pool.TakeNameless
	}
	st, nm, err := take()
	if err != nil {
		return err
	}
	if !empty {
		if err := staging.CopyData(st, h.base); err != nil {
			h.n.r.dropTemp(h.n.r.stagingfd, st, nm)
			return err
		}
	}
	h.stage, h.stageNm = st, nm
	return nil
}

// roomForCopy checks there is room for the daemon to copy f's data for
// this handle's user.
func (h *handle) roomForCopy(f *os.File) error {
	st, err := backing.Fstat(int(f.Fd()))
	if err != nil {
		return err
	}
	return h.n.r.roomFor(h.uid, st.Blocks*512)
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.flushed.Store(false)
	if h.private {
		n, err := unix.Pwrite(int(h.base.Fd()), data, off)
		return uint32(max(n, 0)), h.errno(err)
	}
	if h.raw {
		return h.rawWrite(data, off)
	}
	if err := h.n.r.roomFor(h.uid, int64(len(data))); err != nil {
		return 0, h.errno(err)
	}
	h.rmwWrite()
	if h.bufferWrite(data, off) {
		h.wroteBytes(ctx)
		h.wroteAppend(int64(len(h.buf)))
		return uint32(len(data)), 0
	}
	if err := h.spill(); err != nil {
		return 0, h.errno(err)
	}
	if err := h.copyUp(h.append); err != nil {
		return 0, h.errno(err)
	}
	if h.append || h.atEnd {
		// The kernel's offset comes from its cached size: appends go
		// after this handle's own pending bytes, placed at commit.
		st, err := backing.Fstat(int(h.stage.Fd()))
		if err != nil {
			return 0, h.errno(err)
		}
		off = st.Size
	}
	n, err := unix.Pwrite(int(h.stage.Fd()), data, off)
	if n > 0 {
		h.wroteBytes(ctx)
		h.writeBehind(off + int64(n))
		h.wroteAppend(off + int64(n))
	}
	if err != nil {
		return uint32(max(n, 0)), h.errno(err)
	}
	return uint32(n), 0
}

// wroteBytes records a write that put bytes in the pending version,
// buffered or staged.
func (h *handle) wroteBytes(ctx context.Context) {
	h.wrote = h.wrote || hasFh(ctx)
	h.changed()
	h.noteSize()
}

// changed records a change made by the handle's user: pending, and
// neither left by a killed process nor only the open's O_TRUNC.
func (h *handle) changed() {
	h.settled.Store(0)
	h.dirty, h.killed, h.truncOnly = true, false, false
}

// truncate is ftruncate on this handle: a change like a write.
func (h *handle) truncate(size uint64) error {
	if h.raw {
		return h.rawTruncate(int64(size))
	}
	if h.private {
		return unix.Ftruncate(int(h.base.Fd()), int64(size))
	}
	if err := h.spill(); err != nil {
		return err
	}
	if err := h.unappend(size == 0); err != nil {
		return err
	}
	if err := h.copyUp(size == 0); err != nil {
		return err
	}
	// Also on an empty staging file: a truncation sets mtime and ctime
	// to now, and one the pool made ahead has older times.
	if err := unix.Ftruncate(int(h.stage.Fd()), int64(size)); err != nil {
		return err
	}
	h.changed()
	h.noteSize()
	return nil
}

// unappend makes an appender's pending version whole: the committed file
// followed by its pending appends (nothing when empty). ftruncate and
// fallocate on an O_APPEND descriptor act on the whole file, so its close
// then replaces the file, as any rewrite does: appends that others commit
// meanwhile are not in it. Its later writes go to the end of its version.
func (h *handle) unappend(empty bool) error {
	if !h.append {
		return nil
	}
	if err := h.spill(); err != nil {
		return err
	}
	pending, pendingNm := h.stage, h.stageNm
	h.stage, h.stageNm, h.append = nil, "", false
	err := h.copyUp(empty)
	if err == nil && pending != nil && !empty {
		err = staging.AppendTo(h.stage, pending)
	}
	if err != nil {
		if h.stage != nil {
			h.n.r.dropTemp(h.n.r.stagingfd, h.stage, h.stageNm)
		}
		h.stage, h.stageNm, h.append = pending, pendingNm, true
		return err
	}
	if pending != nil {
		h.n.r.dropTemp(h.n.r.stagingfd, pending, pendingNm)
	}
	h.atEnd = true
	return nil
}

func (h *handle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.raw {
		return h.rawAllocate(mode, int64(off), int64(size))
	}
	if h.private {
		return h.errno(unix.Fallocate(int(h.base.Fd()), mode, int64(off), int64(size)))
	}
	if err := h.n.r.roomFor(h.uid, int64(size)); err != nil {
		return h.errno(err)
	}
	if err := h.unappend(false); err != nil {
		return h.errno(err)
	}
	if err := h.copyUp(false); err != nil {
		return h.errno(err)
	}
	if err := unix.Fallocate(int(h.stage.Fd()), mode, int64(off), int64(size)); err != nil {
		return h.errno(err)
	}
	h.changed()
	h.noteSize()
	return 0
}

func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.spillNew(); err != nil {
		return 0, h.errno(err)
	}
	src := h.base
	if h.stage != nil && !h.append {
		src = h.stage
	}
	n, err := unix.Seek(int(src.Fd()), int64(off), int(whence))
	if err != nil {
		return 0, h.errno(err)
	}
	return uint64(n), 0
}

// stat describes what this handle reads: the version it opened (a
// writer: the latest), with the size and times of its pending version.
func (h *handle) stat() (unix.Stat_t, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.statLocked()
}

func (h *handle) statLocked() (unix.Stat_t, error) {
	if h.closed {
		return unix.Stat_t{}, syscall.EBADF
	}
	if h.raw {
		return backing.Fstat(int(h.base.Fd()))
	}
	if err := h.refresh(); err != nil {
		return unix.Stat_t{}, err
	}
	if h.newFile {
		return h.statNew()
	}
	if err := h.spill(); err != nil {
		return unix.Stat_t{}, err
	}
	h.n.f.inPlace.RLock()
	st, err := backing.Fstat(int(h.base.Fd()))
	h.n.f.inPlace.RUnlock()
	if err != nil || h.stage == nil {
		if err == nil {
			h.seen.Store(st.Size)
		}
		return st, err
	}
	ps, err := backing.Fstat(int(h.stage.Fd()))
	if err != nil {
		return st, err
	}
	if h.append {
		st.Size, st.Blocks = st.Size+ps.Size, st.Blocks+ps.Blocks
	} else {
		st.Size, st.Blocks = ps.Size, ps.Blocks
	}
	st.Mtim, st.Ctim = ps.Mtim, ps.Ctim
	if h.dirty {
		// A non-root writer's change drops set-id bits (at its commit:
		// keptMode), as a write does at once on a local file system.
		st.Mode = st.Mode&^07777 | h.keptMode(st.Mode)
	}
	h.seen.Store(st.Size)
	return st, nil
}

// Flush is close(): it commits pending changes, unless the closing
// process is being killed by a signal.
func (h *handle) Flush(ctx context.Context) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.takeUnlockErr(); err != nil {
		h.flush(ctx)
		return h.errno(err)
	}
	return h.flush(ctx)
}

func (h *handle) flush(ctx context.Context) syscall.Errno {
	h.flushed.Store(true)
	if h.raw {
		return 0 // nothing pending: written in place
	}
	h.ptWrote()
	if !h.dirty {
		h.settle()
		return 0
	}
	if h.n.r.opts.KillCheck {
		if c, ok := fuse.FromContext(ctx); ok && proc.KilledBySignal(c.Pid) {
			if h.publishes() {
				// A killed appender keeps its complete lines
				// (appendpub.go); a partial last line is not committed.
				h.keepErr(h.publishLines(0))
				if !h.dirty {
					return 0
				}
			}
			h.killedClose(c.Pid)
			return 0
		}
	}
	h.killed = false
	if h.truncOnly && h.deferTrunc(ctx) {
		return 0 // another descriptor brings the content
	}
	if h.openerGoesOn(ctx) {
		return 0 // the opener's own close commits
	}
	last := false
	if c, ok := fuse.FromContext(ctx); ok {
		h.closer = c.Pid
		defer func() { h.closer = 0 }()
		last = h.ptWrite && h.ptLast(c.Pid)
	}
	err := h.ptCommit(last)
	if err == nil {
		h.settle()
	}
	return h.errno(err)
}

// killedClose is the close of a writer killed by a signal: nothing is
// committed, but the pending version is kept, since another process may
// share this descriptor (fork) and close it alive later.
func (h *handle) killedClose(pid uint32) {
	h.killed = true
	if p := h.n.path(); h.n.r.isSelfTestProbe(p) {
		h.n.r.selfTestSeen.Store(true) // not a user's writer: not counted
		return
	}
	h.n.r.count.killed.Add(1)
	h.obsKilled(pid)
	msg := "writer killed by a signal: not committed"
	if h.publishes() {
		msg = "appender killed by a signal: its partial last line not committed"
	}
	h.n.r.log.Info(msg, zap.String("path", logPath(h.n.path())))
}

func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.raw {
		return h.rawSync(flags&fsyncDataOnly != 0)
	}
	h.ptWrote()
	if h.dirty {
		return h.errno(h.ptCommit(false)) // the descriptor writes on
	}
	return h.errno(h.base.Sync())
}

// Release commits only what no Flush committed (e.g. no FLUSH was sent).
func (h *handle) Release(ctx context.Context) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ptWrote()
	if h.dirty && !h.killed {
		if err := h.commit(); err != nil {
			h.n.r.log.Warn("commit at release failed", zap.String("path", h.n.path()), zap.Error(err))
		}
	}
	h.close()
	return 0
}

// close drops the handle's pending version and its descriptors.
func (h *handle) close() {
	if h.closed {
		return
	}
	h.stopPublish()
	h.discard()
	h.rmwClose()
	h.n.f.dropHandle(h)
	h.n.r.openWriters.drop(h)
	h.cachedReleased()
	h.ptRelease()
	h.rawReleased()
	h.setBase(nil, 0)
	if h.shared != nil {
		h.shared.release()
	} else {
		h.first.Close()
	}
	h.closed = true
	h.n.r.files.Give(h.uid)
}

// deferTrunc reports whether a close whose only pending change is the
// open's O_TRUNC should leave it pending: the closing process is not the
// one that opened the file (a child that inherited it and wrote nothing),
// or still holds another descriptor on it (a shell's dup2 to stdout). The
// opener's own last close commits it: `: > file` empties the file.
func (h *handle) deferTrunc(ctx context.Context) bool {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return false
	}
	if tgid := h.tgidOf(c.Pid); tgid != 0 && tgid != h.tgid {
		return true
	}
	return proc.HoldsOpen(c.Pid, h.n.f.ino, h.n.r.mountID())
}

// openerGoesOn reports whether a close from a process other than the
// opener should leave the pending version to the opener, which still
// holds a descriptor on the file: a child that inherited it and exits,
// or closes it at exec (Perl's system() while a file is half written),
// would otherwise publish the opener's half-written version.
func (h *handle) openerGoesOn(ctx context.Context) bool {
	c, ok := fuse.FromContext(ctx)
	if !ok || h.tgid == 0 {
		return false
	}
	if tgid := h.tgidOf(c.Pid); tgid == 0 || tgid == h.tgid {
		return false
	}
	return proc.HoldsOpen(h.tgid, h.n.f.ino, h.n.r.mountID())
}

// rank orders a process's handles by how likely its fstat means them:
// one with pending changes, then one in use, then one closed once.
func (h *handle) rank() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.stage != nil, h.newFile:
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

// discard drops the pending version.
func (h *handle) discard() {
	if h.stage != nil {
		h.n.r.dropTemp(h.n.r.stagingfd, h.stage, h.stageNm)
	}
	h.dropBuf()
	h.stage, h.stageNm, h.dirty, h.newFile, h.made = nil, "", false, false, false
	h.staged.Store(0)
}
