package fs

import (
	"context"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Passthrough for reader nodes (cache=version with passthrough=read,
// docs/design.md, "Versions and kernel inodes"). A reader node serves one version for
// its whole life, so it may be given that version's backing file: its
// reads and maps go from the kernel to the backing inode's own page
// cache, never through the daemon. The kernel allows one backing file
// per kernel inode while any file of it uses one, refuses a cached
// (KEEP_CACHE) open of such an inode, and a first passthrough open
// while a cached file or a shared map of the inode is open; so a node's
// mode (passthrough or page cache) is decided by its first reader when
// nothing else of it is open, and every later open of it while any
// passthrough file of it is open shares its backing (a direct reader of
// another version too: its read() stays its own, its maps are the
// node's version).
//
// A passed-through reader reads the backing inode without the daemon,
// so nothing may be written into that inode while it is open. Commits
// in place are appends, a new file's first content and rewrites of
// hard-linked files; so passthrough is given only to versions of at
// least ptMinSize (a new file's is empty) with one link, never to a file
// appended to (appended, while the daemon knows the file), and an append while a passed-through reader
// holds the committed inode replaces the file instead (appendReplaces):
// a log read while appended to pays one copy.

// ptMinSize: smaller versions are read through the page cache. A
// passthrough open costs more than a cached one (64 KiB read whole by
// Perl: 290-372 us against 233-261), while the page cache's first read of a
// version goes through the daemon (512 MiB: 1.4 GB/s against 14-18).
const ptMinSize = 1 << 20

// ptBig reports whether a reader opening n now may be passed through: a
// reader of a node where a writer was is then sent to a node of its own
// at once, not after readerMoveAfter. Directly read, a big file comes
// through the daemon (3 GB/s), passed through from the backing file's
// page cache (14-18 GB/s); the move costs a lookup and an open.
func (n *Node) ptBig() bool {
	if !n.r.opts.Passthrough || n.r.pt.off.Load() || !n.isDirect() {
		return false // only a direct node's readers ask (readerMoves)
	}
	st, err := n.stat()
	return err == nil && st.Size >= ptMinSize && st.Nlink == 1
}

// isDirect reports whether n is a direct node now.
func (n *Node) isDirect() bool {
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	return n.rl.role == roleDirect
}

// ptNode is a node's passthrough state (under its file's mu).
type ptNode struct {
	id     int32 // registered backing ID, 0: none
	open   int   // handles opened with id, not yet released
	writer bool  // id is a writer's staging file (ptwrite.go)
	// freed: closed when the last handle with id is released, made by
	// an open that waits for that (ptAwaitRelease).
	freed chan struct{}
}

// ptReader gives h, a reader of n's own version whose base stat is st,
// n's backing file if n is in passthrough mode or may enter it (f.mu
// held). false: read through the page cache.
func (n *Node) ptReader(ctx context.Context, h *handle, st *unix.Stat_t) bool {
	if _, ok := replyOf(ctx); !ok {
		return false
	}
	if n.rl.pt.id == 0 {
		if n.rl.cached > 1 || !n.ptMay(h, st) {
			return false
		}
		id, ok := n.r.ptBacking(h.base)
		if !ok {
			return false
		}
		n.ptSet(id)
	}
	n.ptShare(ctx, h)
	n.r.count.passthrough.Add(1)
	return true
}

// ptSet records id as n's backing file (f.mu held).
func (n *Node) ptSet(id int32) {
	n.rl.pt.id = id
	if n.f.roles.pt == nil {
		n.f.roles.pt = map[*Node]struct{}{}
	}
	n.f.roles.pt[n] = struct{}{}
}

// ptMay reports whether n may enter passthrough mode for h (f.mu held).
func (n *Node) ptMay(h *handle, st *unix.Stat_t) bool {
	f, r := n.f, n.r
	if !r.opts.Passthrough || r.pt.off.Load() || f.roles.appended || st.Nlink != 1 || st.Size < ptMinSize {
		return false
	}
	// A direct file of n may have a shared map (the first passthrough
	// open would fail).
	return n.handle(func(o *handle) bool { return o != h }) == nil
}

// ptShare makes h's open carry n's backing ID, if n has one (f.mu
// held): while a passthrough file of the inode is open, an open without
// it fails.
func (n *Node) ptShare(ctx context.Context, h *handle) bool {
	cancel, ok := replyOf(ctx)
	if n.rl.pt.id == 0 || !ok {
		return false
	}
	n.rl.pt.open++
	h.ptNode = true
	n.r.pt.ids.Store(cancel, n.rl.pt.id)
	return true
}

// replyOf is the key of ctx's request for ptReply.
func replyOf(ctx context.Context) (<-chan struct{}, bool) {
	c, ok := ctx.(*fuse.Context)
	if !ok || c.Cancel == nil {
		return nil, false
	}
	return c.Cancel, true
}

// ptNodeReleased drops h's count on its node's backing file; the last
// one unregisters it (f.mu held).
func (h *handle) ptNodeReleased() {
	if !h.ptNode {
		return
	}
	h.ptNode = false
	n := h.n
	if n.rl.pt.open--; n.rl.pt.open > 0 {
		return
	}
	n.r.ptUnregister(n.rl.pt.id)
	if n.rl.pt.freed != nil {
		close(n.rl.pt.freed)
	}
	n.rl.pt = ptNode{}
	delete(n.f.roles.pt, n)
}

// appendReplaces reports whether h's append must replace the file: a
// passed-through reader holds the committed inode. It marks f appended
// first, so that no reader is passed through from then on. The caller
// holds the file's commit lock.
func (h *handle) appendReplaces() bool {
	r, f := h.n.r, h.n.f
	if !r.opts.VersionCache || !r.opts.Passthrough {
		return false
	}
	k := r.ids.current(f) // the tables' lock, not under f.mu
	f.mu.Lock()
	defer f.mu.Unlock()
	f.roles.appended = true
	for n := range f.roles.pt {
		if n.rl.key == k {
			return true
		}
	}
	return false
}
