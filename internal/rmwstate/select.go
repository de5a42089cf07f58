package rmwstate

import (
	"context"

	"go.uber.org/zap"

	"github.com/safefs/safefs/internal/loglimit"
	"github.com/safefs/safefs/rmw"
)

// Selected reports whether the opens by thread tid of user uid of a
// file at paths take sessions, the process they take it in the name of
// (0: the thread itself), and for a learned pair the class of the
// process's request (nil: every open takes a session). Globs select
// every process; learned paths only the programs that user was seen
// running when it did a read-modify-write on them, and the children of
// a family pair's.
func (x *State) Selected(tid, uid uint32, paths []string) (uint32, bool, *rmw.Class) {
	for _, p := range paths {
		if x.cfg.Globs.Match(p) {
			return 0, true, nil
		}
	}
	if !x.cfg.Auto {
		return 0, false, nil
	}
	for _, p := range paths {
		if x.learned.HasPath(uid, p) {
			// A program that cannot be told takes a session: a
			// session costs a reader time (its user's only), a
			// missed one an increment.
			pid := x.cfg.Procs.TgidOrSelf(tid)
			pair := rmw.Pair{UID: uid, Path: p, Cmd: x.cfg.Procs.Program(pid)}
			if pair.Cmd == "" {
				return 0, true, nil
			}
			if !x.learned.Has(pair) {
				return x.parentSelected(pid, pair)
			}
			return 0, true, x.classes.Get(pair, x.cfg.Procs.RequestFeatures(pid))
		}
	}
	return 0, false, nil
}

// parentSelected: the path has pairs for the opener's user, but not the
// opener's program (pid's; pair names it). Its open takes a session in
// the name of its parent when the parent's program is a family pair of
// the path (a shell script's cat, docs/sessions.md).
func (x *State) parentSelected(pid uint32, pair rmw.Pair) (uint32, bool, *rmw.Class) {
	if !x.learned.HasFamilyPath(pair.UID, pair.Path) {
		return 0, false, nil
	}
	// A parent that cannot be told: a session of the opener's own, as
	// for a program that cannot be told (a session costs a reader time,
	// a missed one an update).
	pp := x.cfg.Procs.Parent(pid)
	if pp == 0 {
		return 0, true, nil
	}
	parent := rmw.Pair{UID: pair.UID, Path: pair.Path, Cmd: x.cfg.Procs.Program(pp)}
	if parent.Cmd == "" && pp > 1 {
		return 0, true, nil
	}
	if !x.learned.IsFamily(parent) {
		return 0, false, nil
	}
	return pp, true, x.classes.Get(parent, x.cfg.Procs.RequestFeatures(pp))
}

// Gate is what request class cls (nil: none) makes of an open by thread
// tid, for writing or not: skip, no session (a read of a class judged
// read-only); unneeded, closed when the class is judged read-only (a
// wait for a session ends then).
func (x *State) Gate(cls *rmw.Class, write bool, tid uint32) (skip bool, unneeded <-chan struct{}) {
	switch {
	case cls == nil:
	case write:
		if cls.Wrote() {
			x.cfg.Log.Warn("rmw: a request class judged read-only opened the file for writing: its requests take sessions again",
				zap.String("path", loglimit.Path(cls.Pair.Path)), zap.String("program", cls.Pair.Cmd), zap.Uint32("uid", cls.Pair.UID),
				zap.String("class", cls.Features), zap.Uint32("pid", x.cfg.Procs.Tgid(tid)))
		}
	case cls.ReadOnly():
		return true, nil
	default:
		unneeded = cls.Judged()
	}
	return false, unneeded
}

// maxReenter bounds EnterCurrent's tries.
const maxReenter = 8

// EnterCurrent enters, for who, user uid's session of the file at a
// path (key; current tells the key of the file at that path now): a
// session just taken on a file a rename replaced meanwhile excludes no
// one, so it is ended and the file in its place entered instead. A
// session moved while its opener waited is the current one.
func (x *State) EnterCurrent(ctx context.Context, uid uint32, key uint64, who int32, unneeded <-chan struct{}, current func() uint64) (*rmw.Session, rmw.Outcome, int32) {
	t := x.Table(uid)
	for i := 0; ; i++ {
		s, out, other := t.EnterUnless(ctx, key, who, x.cfg.Procs.IsFamily, x.cfg.Wait, unneeded)
		if out != rmw.Took || i == maxReenter {
			return s, out, other
		}
		cur := current()
		if cur == s.Key() {
			return s, out, other
		}
		s.End()
		key = cur
	}
}

// Owns reports whether thread tid holds s or runs in a child of its
// holder.
func (x *State) Owns(s *rmw.Session, tid uint32) bool {
	return uint32(s.Holder) == tid || x.cfg.Procs.IsFamily(s.Holder, int32(tid))
}

// Warn logs one line naming the path and both threads (tid, and other
// whose session it met) with their processes, within the log's limit.
func (x *State) Warn(msg, path string, tid uint32, other int32) {
	ok, skipped := x.warnLog.Allow()
	if !ok {
		return
	}
	p := x.cfg.Procs
	pid, holder := p.Tgid(tid), int32(p.Tgid(uint32(other)))
	x.cfg.Log.Warn(msg, zap.String("path", loglimit.Path(path)),
		zap.Uint32("pid", pid), zap.Uint32("tid", tid), zap.String("cmdline", p.ShortCmdline(pid)),
		zap.Int32("holder_pid", holder), zap.Int32("holder_tid", other), zap.String("holder_cmdline", p.ShortCmdline(uint32(holder))),
		zap.Int("not_logged_before", skipped))
}
