package fs

import (
	"sort"
	"time"

	"github.com/safefs/safefs/internal/backing"
	"github.com/safefs/safefs/internal/proc"
)

// Status is what `safefs status` shows: a snapshot of a live mount.
type Status struct {
	Mountpoint string         `json:"mountpoint"`
	Node       string         `json:"node,omitempty"` // cluster mode: this daemon's node name
	Locks      []LockStatus   `json:"locks"`          // files whose commit lock is held
	Writers    []WriterStatus `json:"writers"`        // handles open for writing
	Rejected   []KeptFile     `json:"rejected"`       // what rejected/ holds
	// Sessions are the read-modify-write sessions held (rmw option);
	// Classes the request classes of the learned programs (rmw=auto).
	Sessions []SessionStatus `json:"rmw_sessions"`
	Classes  []ClassStatus   `json:"rmw_classes"`
	Counters Stats           `json:"counters"`
}

// LockStatus is one held commit lock, its holder and its waiters in the
// order they will be served.
type LockStatus struct {
	Path    string  `json:"path"`
	Holder  Party   `json:"holder"`
	Waiters []Party `json:"waiters"`
}

// SessionStatus is one read-modify-write session: the file, its
// holder and the opens waiting for it, in the order they will be served.
type SessionStatus struct {
	Path    string  `json:"path"`
	Holder  Party   `json:"holder"`
	Open    int     `json:"open"` // opens under it; 0: only rmw_hold keeps it
	Waiters []Party `json:"waiters"`
}

// ClassStatus is one request class of a learned (file, program) pair:
// "writes" (its requests take sessions), "read-only" (its read-only
// opens take none), or "learning" (sessions, Reads of ReadOnlyAfter
// ended without a write so far).
type ClassStatus struct {
	Path    string `json:"path"`
	UID     uint32 `json:"uid"`
	Program string `json:"program"`
	Class   string `json:"class"` // "": not a CGI request
	State   string `json:"state"`
	Reads   int    `json:"reads"`
}

// Party is a process holding or waiting for a lock. PID and Cmdline are
// 0 and "" for a lock taken by a rename or unlink (no commit).
type Party struct {
	PID     uint32  `json:"pid"`
	TID     uint32  `json:"tid,omitempty"` // sessions: the thread, if not PID
	UID     uint32  `json:"uid"`
	Cmdline string  `json:"cmdline"`
	For     float64 `json:"for_seconds"` // held, or waited, so far
}

// WriterStatus is one handle open for writing.
type WriterStatus struct {
	Path         string `json:"path"`
	PID          uint32 `json:"pid"`
	UID          uint32 `json:"uid"`
	Cmdline      string `json:"cmdline"`
	PendingBytes int64  `json:"pending_bytes"`
}

// KeptFile is one file in rejected/.
type KeptFile struct {
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
}

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
		Rejected: r.keptList()}
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
	out := []ClassStatus{}
	if r.rmw == nil {
		return out
	}
	for _, c := range r.rmw.Classes() {
		cs := ClassStatus{Path: c.Pair.Path, UID: c.Pair.UID, Program: c.Pair.Cmd, Class: c.Features, State: "learning", Reads: c.Reads}
		switch {
		case c.Wrote:
			cs.State = "writes"
		case c.ReadOnly:
			cs.State = "read-only"
		}
		out = append(out, cs)
	}
	return out
}

// sessions lists the sessions of every user's table, by path.
func (r *root) sessions(byIno map[uint64]*file, now time.Time) []SessionStatus {
	out := []SessionStatus{}
	if r.rmw == nil {
		return out
	}
	byKey := map[uint64]*file{}
	for _, f := range byIno {
		for _, k := range r.rmwKeysOf(f) {
			byKey[k] = f
		}
	}
	for uid, t := range r.rmw.AllTables() {
		for _, s := range t.Snapshot() {
			ss := SessionStatus{Path: keyPath(byKey[s.Key], nil), Holder: sessionParty(s.Holder, uid, s.Since, now),
				Open: s.Open, Waiters: []Party{}}
			for _, w := range s.Waiters {
				ss.Waiters = append(ss.Waiters, sessionParty(w.ID, uid, w.Since, now))
			}
			out = append(out, ss)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// sessionParty names thread id of user uid, there since since.
func sessionParty(id int32, uid uint32, since, now time.Time) Party {
	tid := uint32(id)
	p := Party{PID: tid, UID: uid, For: now.Sub(since).Seconds()}
	if pid := proc.Tgid(tid); pid != 0 && pid != tid {
		p.PID, p.TID = pid, tid
	}
	p.Cmdline = cmdlineOf(p.PID)()
	return p
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
	sort.Slice(out, func(i, j int) bool {
		if out[i].Path != out[j].Path {
			return out[i].Path < out[j].Path
		}
		return out[i].PID < out[j].PID
	})
	return out
}

// keptList lists rejected/ by name.
func (r *root) keptList() []KeptFile {
	out := []KeptFile{}
	names, _ := backing.ReadDirNames(r.rejectedfd)
	sort.Strings(names)
	for _, nm := range names {
		if st, err := backing.StatAt(r.rejectedfd, nm); err == nil {
			out = append(out, KeptFile{Name: nm, Bytes: st.Size})
		}
	}
	return out
}
