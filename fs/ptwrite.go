package fs

import (
	"context"
	"os"
	"runtime"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
	"github.com/safefs/safefs/internal/caps"
	"github.com/safefs/safefs/internal/proc"
	"github.com/safefs/safefs/internal/staging"
)

// Passthrough for writers (Options.PassthroughWrite, docs/design.md "Versions and
// kernel inodes"). A write-only open that truncates (Perl's `open >`, a
// shell's `>`, dd) and is alone on its kernel node gets its staging file
// as the node's backing file: its writes go from the kernel into the
// staging file, never through the daemon. The commit is a writer's as
// ever, with three differences:
//   - the daemon does not see the writes: it looks at the staging file
//     at FLUSH, FSYNC and RELEASE (an O_TRUNC open starts it empty);
//   - the kernel keeps the staging file as the open file's backing until
//     its last close, so the file is renamed in only when no descriptor
//     can write after the commit (ptLast); otherwise (an fsync, a copy of
//     the descriptor open in another process) a copy is committed and the
//     staging file stays the backing;
//   - every other open of the node goes to a node of its own (ESTALE), as
//     a reader's open of a writer's node does (readerMoves).

// ptWriter gives h, just opened with flags, its staging file as backing,
// if it may: then the OPEN reply carries the backing ID and no direct
// I/O.
func (n *Node) ptWriter(ctx context.Context, h *handle, flags uint32) bool {
	if !n.ptWriterMay(h, flags) {
		return false
	}
	if _, ok := replyOf(ctx); !ok {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.p.stage == nil || !h.ptBigBase() {
		return false
	}
	f := n.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if !n.ptAlone(h) {
		return false
	}
	id, ok := n.r.ptBackingWriter(h.p.stage)
	if !ok {
		return false
	}
	n.ptSet(id)
	n.rl.pt.writer = true
	n.ptShare(ctx, h)
	h.ptWrite = true
	h.settled.Store(0) // its writes are not seen: its view is never the committed one
	n.r.count.passthroughWrite.Add(1)
	return true
}

// ptWriterMay reports whether h, opened with flags, may write through the
// kernel: write-only (no read, no shared map of its pending bytes),
// truncating an existing file (its staging file starts empty), not an
// append, not inside a read-modify-write session (left as they were).
func (n *Node) ptWriterMay(h *handle, flags uint32) bool {
	r := n.r
	return r.opts.PassthroughWrite && r.opts.VersionCache && r.opts.Passthrough && !r.pt.off.Load() &&
		!r.clustered() && n.f.kind == unix.S_IFREG && h.write && !h.p.appends() && !h.private && h.rmw.sess == nil &&
		flags&syscall.O_ACCMODE == syscall.O_WRONLY && flags&syscall.O_TRUNC != 0 && !h.p.made
}

// ptBigBase reports whether the version h truncated is big and has one
// link (h.mu held): its rewrite is likely big too. A small file's commit
// costs more passed through (measured: a backing file registered and
// unregistered, a copy at close, and the kernel's security.capability
// check at each write) than the one WRITE request it saves.
func (h *handle) ptBigBase() bool {
	st, err := backing.Fstat(int(h.base.Fd()))
	return err == nil && st.Size >= ptMinSize && st.Nlink == 1
}

// ptAlone reports whether h is alone on its node (f.mu held): no other
// handle, no other open on its way, no retry sent there.
func (n *Node) ptAlone(h *handle) bool {
	return n.rl.pt.id == 0 && n.handle(func(o *handle) bool { return o != h }) == nil &&
		!n.othersOpening(h.tid, true) && !n.othersOpening(h.tid, false) && !n.routedElsewhere(h.tid)
}

// ptBackingWriter registers f as a backing file without CAP_SYS_RESOURCE:
// the kernel writes into it with the registering thread's credentials,
// and a user's writes must not reach root's reserved blocks (roomFor).
func (r *root) ptBackingWriter(f *os.File) (int32, bool) {
	runtime.LockOSThread()
	restore, err := caps.DropEffective(unix.CAP_SYS_RESOURCE)
	if err != nil {
		runtime.UnlockOSThread()
		return 0, false
	}
	id, ok := r.ptBacking(f)
	if err := restore(); err != nil {
		// The thread keeps the lesser credentials: it ends with its
		// goroutine (no UnlockOSThread), never serving another request.
		r.log.Error("restore capabilities after a writer's backing file", zap.Error(err))
		return id, ok
	}
	runtime.UnlockOSThread()
	return id, ok
}

// ptMark is what a writer's staging file looked like when ptWrote last
// took it in.
type ptMark struct {
	size       int64
	mtim, ctim unix.Timespec
}

func markOf(st *unix.Stat_t) ptMark { return ptMark{st.Size, st.Mtim, st.Ctim} }

// ptWrote takes in what the kernel wrote into h's staging file since it
// last looked (h.mu held): a change, as a write(2) is. The look is marked
// before a commit copies the file, so a write racing the copy is
// committed next time.
func (h *handle) ptWrote() {
	if !h.ptWrite || h.p.stage == nil {
		return
	}
	st, err := backing.Fstat(int(h.p.stage.Fd()))
	if err != nil || st.Size == 0 || markOf(&st) == h.ptSeen {
		return
	}
	h.ptSeen = markOf(&st) // taken in once: a killed writer's stays killed
	h.rmwWrite()
	h.changed()
	// noteSize's record, from the stat just taken.
	h.p.staged.Store(st.Size + 1)
	h.wrote = true // each write dropped the kernel's cached size and times
}

// ptLast reports whether a commit at a close by thread pid may rename
// h's staging file in: no descriptor of it can write after. The closing
// process holds no other descriptor of the file (a dup, a shell's fd 1),
// and none of its descendants does (fork). An orphaned descendant or a
// descriptor passed over a socket is not seen (docs/threat-model.md, limitations).
func (h *handle) ptLast(pid uint32) bool {
	tgid, mnt := h.tgidOf(pid), h.n.r.mountID()
	if tgid == 0 || mnt == 0 || h.p.stage == nil {
		return false
	}
	if st, err := backing.Fstat(int(h.p.stage.Fd())); err != nil || st.Size <= ptCopyMax {
		return false // a copy costs less than the look
	}
	ino := h.n.f.ino
	if proc.HoldsOpen(tgid, ino, mnt) {
		return false
	}
	kids, all := proc.Descendants(tgid, maxDescendants)
	if !all {
		return false
	}
	for _, k := range kids {
		if proc.HoldsOpen(k, ino, mnt) {
			return false
		}
	}
	return true
}

// maxDescendants bounds the processes ptLast looks at; beyond, a copy is
// committed.
const maxDescendants = 64

// ptCopyMax: a staging file up to this size is committed as a copy
// without a look at the processes (a look reads a /proc file per
// descriptor of the closing process and of each of its descendants).
const ptCopyMax = 64 << 10

// ptCommit commits h; a passed-through writer's descriptor that may still
// write (last false) commits a copy of its staging file, which stays the
// kernel's backing file.
func (h *handle) ptCommit(last bool) error {
	if !h.ptWrite || h.p.stage == nil || last {
		return h.commit()
	}
	r := h.n.r
	own, ownNm := h.p.stage, h.p.stageNm
	cp, nm, err := r.pool.Take()
	if err != nil {
		return err
	}
	if err := staging.CopyData(cp, own); err != nil {
		r.dropTemp(r.stagingfd, cp, nm)
		return err
	}
	h.p.stage, h.p.stageNm = cp, nm
	err = h.commit()
	if h.p.stage == cp { // not taken: neither committed nor kept in rejected/
		r.dropTemp(r.stagingfd, cp, nm)
	}
	h.p.stage, h.p.stageNm = own, ownNm
	h.settled.Store(0)
	r.count.passthroughCopied.Add(1)
	return err
}

// ptAwaitRelease waits, at most ptReleaseWait, for the release of n's
// passed-through writer once its close has committed: the kernel sends
// RELEASE after close() returned, and a script's next open of the file
// (a rewrite, or a read) would otherwise need a node of its own.
func (n *Node) ptAwaitRelease() {
	f := n.f
	f.mu.Lock()
	if !n.rl.pt.writer || n.handle(func(h *handle) bool { return !h.flushed.Load() }) != nil {
		f.mu.Unlock()
		return
	}
	if n.rl.pt.freed == nil {
		n.rl.pt.freed = make(chan struct{})
	}
	ch := n.rl.pt.freed
	f.mu.Unlock()
	t := time.NewTimer(ptReleaseWait)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	}
}

// ptReleaseWait: a RELEASE is queued before close() returns to its
// caller, so it comes within a moment unless another process shares the
// descriptor.
const ptReleaseWait = 10 * time.Millisecond
