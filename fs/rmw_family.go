package fs

import (
	"context"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/proc"
	"github.com/safefs/safefs/rmw"
)

// Sessions of process families (docs/sessions.md). A shell script reads
// a file through a child (`n=$(cat f)`) and writes it itself (`> f`), or
// has a child read it into a temporary file that another child renames
// over it (`awk ... f > f.$$ && mv f.$$ f`); sed -i reads it and renames
// a temporary file over it. Learned as a family pair: the script's
// process, whose children open the file in its name, so that one
// session spans the request's read and its write (an open, or a rename
// over the file).

// writtenKeep is how long a file opened for writing stays one whose
// readers' parents are read; maxWritten bounds that set.
const (
	writtenKeep = 10 * time.Minute
	maxWritten  = 4096
)

// rmwParentSelected: n's path has pairs for the opener's user, but not
// the opener's program (pid's; pair names it). Its open takes a session
// in the name of its parent when the parent's program is a family pair
// of the path.
func (n *Node) rmwParentSelected(pid uint32, pair rmw.Pair) (uint32, bool, *rmw.Class) {
	x := n.r.rmw
	if !x.learned.HasFamilyPath(pair.UID, pair.Path) {
		return 0, false, nil
	}
	// A parent that cannot be told: a session of the opener's own, as
	// for a program that cannot be told (a session costs a reader time,
	// a missed one an update).
	pp := proc.Parent(pid)
	if pp == 0 {
		return 0, true, nil
	}
	parent := rmw.Pair{UID: pair.UID, Path: pair.Path, Cmd: proc.Program(pp)}
	if parent.Cmd == "" && pp > 1 {
		return 0, true, nil
	}
	if !x.learned.IsFamily(parent) {
		return 0, false, nil
	}
	return pp, true, x.classes.Get(parent, proc.RequestFeatures(pp))
}

// rmwNoteRead remembers h's open for reading, with the reader's parent
// when the file was written lately (a file only ever read costs no
// look-up of the parent).
func (n *Node) rmwNoteRead(h *handle) {
	x := n.r.rmw
	parent := uint32(0)
	if x.written.Has(n.f.ino, time.Now()) {
		parent = proc.Parent(h.tid)
	}
	x.reads.NoteChild(n.f.ino, int32(h.tid), int32(parent))
}

// rmwNoteWrite remembers h's open for writing: its file is one whose
// readers' parents are read, and a rename of it over another file may
// be the write of a read-modify-write.
func (n *Node) rmwNoteWrite(h *handle) {
	x := n.r.rmw
	x.written.Add(n.f.ino, time.Now())
	x.writes.Note(n.f.ino, int32(h.tid))
}

// rmwNamesLock is held by a rename from its change of names to its move
// of a session (rmwRenamed): an open's check of the file at its path
// (rmwCurrentKey) sees both or neither.
func (n *Node) rmwNamesLock() (unlock func()) {
	x := n.r.rmw
	if x == nil {
		return func() {}
	}
	x.names.Lock()
	return x.names.Unlock
}

// rmwRenamed: src was renamed over dst (now at path), under
// rmwNamesLock. A session on dst moves to src, the file now at its
// path, with its waiters; when the renaming thread holds it (or is
// family of its holder) the rename is its write: the session ends, as
// at a commit. Otherwise, in auto mode, a rename by a thread that read
// dst, or whose process's child did, or whose sibling read dst and
// wrote src, is learned from. Both by after, called without the lock
// (they may read /proc).
func (n *Node) rmwRenamed(ctx context.Context, src, dst *Node, path string) (after func()) {
	x := n.r.rmw
	c, ok := fuse.FromContext(ctx)
	tid := callerTid(ctx)
	if x == nil || !ok || tid == 0 || src == nil || dst == nil || src == dst || src.f.kind != unix.S_IFREG {
		return func() {}
	}
	from, to := dst.f.ino, src.f.ino
	x.written.Add(to, time.Now())
	s := x.table(c.Uid).Move(from, to)
	x.moves.Add(from, to, path)
	return func() {
		if s != nil && rmwOwns(s, tid) {
			if cls := s.Class(); cls != nil {
				cls.Wrote()
			}
			s.MarkWrote()
			s.End()
		} else if x.auto {
			n.r.rmwLearnRename(from, to, path, tid, c.Uid)
		}
	}
}

// maxReenter bounds rmwEnterCurrent's tries.
const maxReenter = 8

// rmwEnterCurrent enters the session of the file at n's path (key): a
// session just taken on a file a rename replaced meanwhile excludes no
// one, so it is ended and the file in its place entered instead. A
// session moved while its opener waited is the current one.
func (n *Node) rmwEnterCurrent(ctx context.Context, t *rmw.Table, key uint64, who int32, unneeded <-chan struct{}) (*rmw.Session, rmw.Outcome, int32) {
	for i := 0; ; i++ {
		s, out, other := t.EnterUnless(ctx, key, who, proc.IsFamily, n.r.opts.RMWWait, unneeded)
		if out != rmw.Took || i == maxReenter {
			return s, out, other
		}
		cur := n.rmwCurrentKey()
		if cur == s.Key() {
			return s, out, other
		}
		s.End()
		key = cur
	}
}

// rmwCurrentKey is the key of the file now at n's path.
func (n *Node) rmwCurrentKey() uint64 {
	key, _ := n.rmwKey()
	return key
}

// rmwKey is the key of n's sessions and its paths: a file a rename
// replaced has none, and its opens (the kernel resolved the name before
// the rename) wait for the session of the file now at its path.
func (n *Node) rmwKey() (uint64, []string) {
	x := n.r.rmw
	x.names.RLock()
	defer x.names.RUnlock()
	if paths := n.names(); len(paths) > 0 {
		return n.r.rmwKeyAt(n.f.ino, n.path()), paths
	}
	key, p := x.moves.Resolve(n.f.ino)
	if p == "" {
		return n.f.ino, nil
	}
	return n.r.rmwKeyAt(key, p), []string{p}
}

// rmwOwns reports whether thread tid holds s or runs in a child of its
// holder.
func rmwOwns(s *rmw.Session, tid uint32) bool {
	return uint32(s.Holder) == tid || proc.IsFamily(s.Holder, int32(tid))
}

// rmwLearnRename learns from a rename of file to over file from (at
// path) by thread tid of user uid: a read of from by the same thread, by
// a child of its process, or by a sibling process when that sibling or
// their parent wrote to (the parent's temporary file).
func (r *root) rmwLearnRename(from, to uint64, path string, tid, uid uint32) {
	x := r.rmw
	pid := proc.Tgid(tid)
	if pid == 0 {
		return
	}
	if x.reads.Read(from, int32(tid)) {
		r.rmwLearn(path, pid, uid, false)
		return
	}
	if x.reads.ChildRead(from, int32(pid)) != 0 {
		r.rmwLearn(path, pid, uid, true)
		return
	}
	pp := proc.Parent(tid)
	if pp <= 1 {
		return
	}
	if a := x.reads.ChildRead(from, int32(pp)); a != 0 && (x.writes.Read(to, a) || x.writes.Read(to, int32(pp))) {
		r.rmwLearn(path, pp, uid, true)
	}
}

// rmwReplaced reports whether a rename replaced n's file while its open
// waited for s, or just before it took s: the open must not read the
// replaced version. The kernel looks the name up again, and the retry
// finds the new file and joins the session moved there.
func (n *Node) rmwReplaced(s *rmw.Session) bool {
	if s == nil {
		return false
	}
	switch {
	case s.Key() != n.f.ino:
		s.Close()
	case len(n.f.nameList()) == 0:
		s.End() // on a file no name leads to: no one else's
	default:
		return false
	}
	return true
}
