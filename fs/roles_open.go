package fs

import (
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
)

// The opens' side of kernel inodes by role (roles.go): whether an open
// may use the node it came to, or is sent to a node of its own.

// writerMayOpen decides a write open of n before anything is opened: a
// node whose pages readers hold open sends the writer to a new one
// (false: answer ESTALE): its size and truncation would reach them. Any
// other becomes direct at once, so that a reader opening meanwhile does
// not cache it. A retry (of an open refused) is never sent on: the
// kernel would fail it.
func (n *Node) writerMayOpen(tid uint32, retry bool) bool {
	if !n.r.opts.VersionCache || n.f.kind != unix.S_IFREG {
		return true
	}
	n.ptAwaitRelease()
	readers := n.othersHold(tid, func(h *handle) bool { return !h.write })
	f := n.f
	f.mu.Lock()
	defer f.mu.Unlock()
	readers = readers || n.othersOpening(tid, false) || n.routedElsewhere(tid)
	if !retry && !f.writerSent(tid) && (n.rl.cached > 0 || n.rl.pt.open > 0 || readers) {
		now := time.Now().UnixNano()
		f.roles.writers.prune(now)
		f.moveOn(n.r)
		f.roles.writers.note(tid, now, f.roles.kgen)
		n.r.log.Debug("cache: a writer moves to a node of its own", zap.Uint64("ino", f.ino), zap.Uint64("gen", f.roles.kgen))
		return false
	}
	n.writerCame(tid)
	n.noteOpening(tid, true)
	return true
}

// noteOpening marks thread tid's open of n let through (f.mu held),
// until openDone.
func (n *Node) noteOpening(tid uint32, write bool) {
	if n.rl.opening == nil {
		n.rl.opening = map[uint32]bool{}
	}
	n.rl.opening[tid] = write
}

// openDone ends thread tid's open of n: its handle, if any, counts now.
func (n *Node) openDone(tid uint32) {
	if !n.r.opts.VersionCache {
		return
	}
	n.f.mu.Lock()
	delete(n.rl.opening, tid)
	n.f.mu.Unlock()
}

// othersOpening reports whether a thread other than tid is opening n,
// a writer if write, else a reader (f.mu held).
func (n *Node) othersOpening(tid uint32, write bool) bool {
	for t, w := range n.rl.opening {
		if t != tid && w == write {
			return true
		}
	}
	return false
}

// othersHold reports whether a process other than thread tid's holds a
// handle opened through n that is accepts (f.mu not held). A writer's truncation (its
// O_TRUNC open, ftruncate) cuts the kernel's size of n, and a map of n
// by another process then faults (SIGBUS) past it: such a writer and
// such a reader do not share a node.
func (n *Node) othersHold(tid uint32, is func(*handle) bool) bool {
	f := n.f
	f.mu.Lock()
	some := n.handle(func(h *handle) bool { return h.tid != tid && is(h) }) != nil
	f.mu.Unlock()
	if !some {
		return false
	}
	tgid := f.tgidOf(tid)
	f.mu.Lock()
	defer f.mu.Unlock()
	return n.handle(func(h *handle) bool { return h.tgid != tgid && is(h) }) != nil
}

// writerSent reports whether thread tid's write open was sent on within
// retryWindow (f.mu held): its retry is never sent on again (a second
// ESTALE fails the open).
func (f *file) writerSent(tid uint32) bool {
	s, ok := f.roles.writers[tid]
	return ok && s.live(time.Now().UnixNano())
}

// writerCame makes n a writer's node (f.mu held): direct, and the
// writer's retry, if it was sent on, has arrived.
func (n *Node) writerCame(tid uint32) {
	n.becomeDirect()
	n.rl.wrote = time.Now().UnixNano()
	n.opened()
	delete(n.f.roles.writers, tid)
}

// readerMayOpen decides a read-only open of n by thread tid; false: it
// is sent to a node of a new generation (answer ESTALE), made for the
// version the file has then. Its retry (retry, or the file's own mark)
// is never sent on again.
func (n *Node) readerMayOpen(tid uint32, retry bool) bool {
	if !n.r.opts.VersionCache || n.f.kind != unix.S_IFREG {
		return true
	}
	f := n.f
	if f.retrying(tid) || retry {
		f.mu.Lock()
		n.noteOpening(tid, false)
		f.mu.Unlock()
		return true
	}
	n.ptAwaitRelease()
	big := n.ptBig()
	// Another process's handle on n showing another version than this
	// open's: a writer's pending one (its truncation may have cut n's
	// size, see othersHold) or an older reader's (n's pages are shared:
	// its map and this one would mix). f.mu is held in the test.
	cut := n.othersHold(tid, f.showsOther)
	f.mu.Lock()
	defer f.mu.Unlock()
	if !cut && !n.othersOpening(tid, true) && !n.routedElsewhere(tid) && !n.readerMoves(big) {
		n.noteOpening(tid, false)
		return true
	}
	n.sendReaderOn(tid)
	return false
}

// showsOther reports whether handle h shows another version than the
// file's committed one (f.mu held): a writer's pending one, or an older
// reader's.
func (f *file) showsOther(h *handle) bool {
	return h.write && h.settled.Load() != f.version+1 || !h.write && h.baseVer != f.version
}

// sendReaderOn moves f to a new generation for reader thread tid's
// retry (f.mu held).
func (n *Node) sendReaderOn(tid uint32) {
	f := n.f
	now := time.Now().UnixNano()
	f.roles.sent.prune(now)
	f.moveOn(n.r)
	f.roles.sent.note(tid, now, f.roles.kgen)
	n.r.log.Debug("cache: a reader moves to a node of its own", zap.Uint64("ino", f.ino), zap.Uint64("gen", f.roles.kgen))
}

// readerMixes reports whether reader h, just opened through n, would
// share n's pages with another process's handle of another version; if
// so h's thread is sent on, as readerMayOpen would have. A commit can
// come between readerMayOpen and the open of h's version, and the
// version counter moves after the rename: two readers with one baseVer
// opened two versions, and their maps mixed them in n's pages. So the
// versions are compared by backing inode. A retry is let through. It
// also gives the stat of h's version (nil: none), which the reply's
// flags need too: known, st, when the open took its node's descriptor.
func (n *Node) readerMixes(h *handle, st *unix.Stat_t, retry bool) (*unix.Stat_t, bool) {
	f := n.f
	if !n.r.opts.VersionCache || f.kind != unix.S_IFREG || h.write {
		return nil, false
	}
	if st == nil {
		s, err := backing.Fstat(int(h.base.Fd()))
		if err != nil {
			return nil, false
		}
		st = &s
	}
	f.mu.Lock()
	h.verKey = keyOf(st)
	f.mu.Unlock()
	if retry {
		return st, false
	}
	committed := n.r.ids.current(f)
	if !n.othersHold(h.tid, func(o *handle) bool {
		if o.write {
			return f.showsOther(o) || committed != h.verKey // a pending version, or not h's
		}
		return o != h && o.verKey != h.verKey
	}) {
		return st, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n.sendReaderOn(h.tid)
	return nil, true
}

// retrying reports whether thread tid's read-only open is the retry of
// one sent on (its next open, within retryWindow): it is not sent again.
func (f *file) retrying(tid uint32) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.roles.sent[tid]
	delete(f.roles.sent, tid)
	return ok && s.live(time.Now().UnixNano())
}

// readerMoves (f.mu held): n's backing file is a writer's staging file
// (ptwrite.go), or n is a reader node of an older version while
// its readers are open (a direct open there would drop their pages, and
// its map would fill them with another version's) or while it has a
// backing file (roles_pt.go), or a direct node that no writer holds and
// none opened for readerMoveAfter, or any direct node if the version is
// big (its reader will be passed through: ptBig).
func (n *Node) readerMoves(big bool) bool {
	f := n.f
	if n.rl.pt.writer {
		return true // the backing file is a writer's pending version
	}
	if n.rl.ver != f.version && (n.rl.role == roleReader && n.rl.cached > 0 || n.rl.pt.open > 0) {
		return true // an open there would map the node's backing, an older version
	}
	if n.rl.role != roleDirect || n.rl.wrote == 0 {
		return false
	}
	if big && !f.roles.appended {
		return true // even while a writer holds n: the reader keeps its version
	}
	if time.Now().UnixNano()-n.rl.wrote < int64(readerMoveAfter) {
		return false
	}
	return n.handle(func(h *handle) bool { return h.write }) == nil
}
