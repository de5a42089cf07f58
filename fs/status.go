package fs

import (
	"time"

	"github.com/safefs/safefs/internal/report"
	"github.com/safefs/safefs/rmw"
)

// What a status shows (package report).
type (
	Status        = report.Status
	LockStatus    = report.LockStatus
	SessionStatus = report.SessionStatus
	ClassStatus   = report.ClassStatus
	Party         = report.Party
	WriterStatus  = report.WriterStatus
	KeptFile      = report.KeptFile
)

// lockWho is the tag a commit locks with, so a status can name it.
type lockWho struct {
	n   *Node
	pid uint32
	uid uint32
}

// who is the tag of h's commit: the closing thread, else the opener.
func (h *handle) who() *lockWho {
	pid := h.closer
	if pid == 0 {
		pid = h.tgid
	}
	return &lockWho{n: h.n, pid: pid, uid: h.uid}
}

// Status reads the mount's state. Like Gauges it never waits for a
// request: it takes only short-lived mutexes, never a handle's.
func (s *Server) Status() Status {
	r := s.r
	st := Status{Mountpoint: r.mountpoint, Counters: r.count.snapshot(), Locks: []LockStatus{}, Writers: r.writers(),
		Rejected: report.Kept(r.rejectedfd)}
	if c := r.opts.Cluster; c != nil {
		st.Node = c.Node()
	}
	byIno := map[uint64]*file{}
	for _, f := range r.ids.all() {
		byIno[f.ino] = f
	}
	now := time.Now()
	for _, k := range r.locks.Snapshot() {
		ls := LockStatus{Path: keyPath(byIno[k.Key], k.Tag), Holder: party(k.Tag, k.Since, now), Waiters: []Party{}}
		for _, w := range k.Waiters {
			ls.Waiters = append(ls.Waiters, party(w.Tag, w.Since, now))
		}
		st.Locks = append(st.Locks, ls)
	}
	st.Sessions = r.sessions(byIno, now)
	st.Classes = r.classes()
	return st
}

// classes lists the request classes of the learned pairs.
func (r *root) classes() []ClassStatus {
	var infos []rmw.ClassInfo
	if r.rmw != nil {
		infos = r.rmw.Classes()
	}
	return report.Classes(infos)
}

// sessions lists the sessions of every user's table, by path.
func (r *root) sessions(byIno map[uint64]*file, now time.Time) []SessionStatus {
	if r.rmw == nil {
		return []SessionStatus{}
	}
	byKey := map[uint64]*file{}
	for _, f := range byIno {
		for _, k := range r.rmwKeysOf(f) {
			byKey[k] = f
		}
	}
	pathOf := func(k uint64) string { return keyPath(byKey[k], nil) }
	return report.Sessions(r.rmw.Snapshots(), pathOf, now, report.System{})
}

func keyPath(f *file, tag any) string {
	if w, ok := tag.(*lockWho); ok {
		return w.n.path()
	}
	if f == nil {
		return "(unknown)"
	}
	if nm, ok := f.anyName(); ok {
		return nm.rel()
	}
	return "(unlinked)"
}

func party(tag any, since, now time.Time) Party {
	p := Party{For: now.Sub(since).Seconds()}
	if w, ok := tag.(*lockWho); ok {
		p.PID, p.UID, p.Cmdline = w.pid, w.uid, cmdlineOf(w.pid)()
	}
	return p
}

// writers lists the handles open for writing, by path then pid.
func (r *root) writers() []WriterStatus {
	out := []WriterStatus{}
	for _, f := range r.ids.all() {
		for _, h := range f.handleList() {
			if !h.write {
				continue
			}
			out = append(out, WriterStatus{Path: h.n.path(), PID: h.tgid, UID: h.uid,
				Cmdline: cmdlineOf(h.tgid)(), PendingBytes: h.pendingBytes()})
		}
	}
	report.SortWriters(out)
	return out
}
