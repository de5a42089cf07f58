package fs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"

	"github.com/safefs/safefs/internal/proc"
)

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
	if !h.p.dirty() {
		h.settle()
		return 0
	}
	if h.n.r.opts.KillCheck {
		if c, ok := fuse.FromContext(ctx); ok && proc.KilledBySignal(c.Pid) {
			if h.publishes() {
				// A killed appender keeps its complete lines
				// (appendpub.go); a partial last line is not committed.
				h.keepErr(h.publishLines(0))
				if !h.p.dirty() {
					return 0
				}
			}
			h.killedClose(c.Pid)
			return 0
		}
	}
	h.p.killed = false
	if h.p.state == truncOnly && h.deferTrunc(ctx) {
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
	h.p.killed = true
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
	if h.p.dirty() {
		return h.errno(h.ptCommit(false)) // the descriptor writes on
	}
	return h.errno(h.base.Sync())
}

// Release commits only what no Flush committed (e.g. no FLUSH was sent).
func (h *handle) Release(ctx context.Context) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ptWrote()
	if h.p.dirty() && !h.p.killed {
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
	h.p.discard(h.n.r)
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
