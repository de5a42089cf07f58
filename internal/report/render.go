package report

import (
	"sort"
	"time"

	"go.uber.org/zap"

	"github.com/safefs/safefs/internal/backing"
	"github.com/safefs/safefs/internal/proc"
	"github.com/safefs/safefs/rmw"
)

// Procs names the processes of a status: in the daemon from /proc.
type Procs interface {
	Tgid(tid uint32) uint32
	Cmdline(pid uint32) string
}

// System answers from /proc (package proc).
type System struct{}

func (System) Tgid(tid uint32) uint32    { return proc.Tgid(tid) }
func (System) Cmdline(pid uint32) string { return proc.Cmdline(pid) }

// Classes renders the request classes of the learned pairs.
func Classes(infos []rmw.ClassInfo) []ClassStatus {
	out := []ClassStatus{}
	for _, c := range infos {
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

// Sessions renders the sessions of every user's table (by uid), by path
// (pathOf names a session's key).
func Sessions(tables map[uint32][]rmw.SessionInfo, pathOf func(key uint64) string, now time.Time, p Procs) []SessionStatus {
	out := []SessionStatus{}
	for uid, sessions := range tables {
		for _, s := range sessions {
			ss := SessionStatus{Path: pathOf(s.Key), Holder: SessionParty(s.Holder, uid, s.Since, now, p),
				Open: s.Open, Waiters: []Party{}}
			for _, w := range s.Waiters {
				ss.Waiters = append(ss.Waiters, SessionParty(w.ID, uid, w.Since, now, p))
			}
			out = append(out, ss)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// SessionParty names thread id of user uid, there since since: its
// process, and the thread too if it is not the process's main one.
func SessionParty(id int32, uid uint32, since, now time.Time, p Procs) Party {
	tid := uint32(id)
	pt := Party{PID: tid, UID: uid, For: now.Sub(since).Seconds()}
	if pid := p.Tgid(tid); pid != 0 && pid != tid {
		pt.PID, pt.TID = pid, tid
	}
	pt.Cmdline = p.Cmdline(pt.PID)
	return pt
}

// SortWriters sorts writers by path, then pid.
func SortWriters(out []WriterStatus) {
	sort.Slice(out, func(i, j int) bool {
		if out[i].Path != out[j].Path {
			return out[i].Path < out[j].Path
		}
		return out[i].PID < out[j].PID
	})
}

// Kept lists directory dir (rejected/) by name.
func Kept(dir int) []KeptFile {
	out := []KeptFile{}
	names, _ := backing.ReadDirNames(dir)
	sort.Strings(names)
	for _, nm := range names {
		if st, err := backing.StatAt(dir, nm); err == nil {
			out = append(out, KeptFile{Name: nm, Bytes: st.Size})
		}
	}
	return out
}

// LogStats logs the counts st (a "stats" line).
func LogStats(log *zap.Logger, st Stats) {
	log.Info("stats", zap.Int64("commits", st.Commits), zap.Int64("rejected", st.Rejected),
		zap.Int64("rejected_dropped", st.Dropped), zap.Int64("killed_writers", st.Killed),
		zap.Int64("unlock_commits", st.UnlockCommits),
		zap.Int64("too_many_files", st.TooManyFiles), zap.Int64("no_space", st.NoSpace),
		zap.Int64("rmw_sessions", st.RMWSessions), zap.Int64("rmw_waits", st.RMWWaits),
		zap.Int64("rmw_cycles_broken", st.RMWCycles), zap.Int64("rmw_waits_given_up", st.RMWGaveUp),
		zap.Duration("rmw_waited", time.Duration(st.RMWWaitNanos)), zap.Int64("rmw_readonly_opens", st.RMWReadOnly),
		zap.Int64("passthrough", st.Passthrough), zap.Int64("passthrough_direct", st.PassthroughDirect),
		zap.Int64("passthrough_write", st.PassthroughWrite), zap.Int64("passthrough_copied", st.PassthroughCopied),
		zap.Int64("raw_files", st.RawFiles), zap.Int64("raw_opens", st.RawOpens))
}
