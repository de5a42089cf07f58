package fs

import (
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Stats counts what a mount did, for the operator: logged at unmount,
// and read by Server.Stats.
type Stats struct {
	Commits  int64 `json:"commits"`  // pending versions published
	Rejected int64 `json:"rejected"` // commits that could not be made: bytes kept in rejected/
	Killed   int64 `json:"killed"`   // closes by writers killed by a signal: not committed
	// UnlockCommits: commits made when a script released a lock before
	// closing what it wrote (unlock.go); also counted in Commits.
	UnlockCommits int64 `json:"unlock_commits"`
	// Dropped: rejected commits whose bytes were not kept because
	// rejected/ was full (RejectedMax, RejectedUserMax).
	Dropped int64 `json:"dropped"`
	// TooManyFiles: opens refused with EMFILE (MaxFilesPerUser).
	TooManyFiles int64 `json:"too_many_files"`
	// NoSpace: writes of non-root callers refused at the free space
	// they may use (statfs f_bavail).
	NoSpace int64 `json:"no_space"`
	// Read-modify-write sessions: opened, opens that waited for one,
	// waits refused because they would close a cycle, and waits given
	// up after rmw_wait (those opens went on without a session).
	RMWSessions int64 `json:"rmw_sessions"`
	RMWWaits    int64 `json:"rmw_waits"`
	RMWCycles   int64 `json:"rmw_cycles"`
	RMWGaveUp   int64 `json:"rmw_gave_up"`
	// RMWWaitNanos: time opens spent waiting for sessions, in all.
	RMWWaitNanos int64 `json:"rmw_wait_ns"`
	// RMWReadOnly: read-only opens of a learned program that took no
	// session, their request class being judged read-only.
	RMWReadOnly int64 `json:"rmw_readonly_opens"`
	// Passthrough (option passthrough=read): opens whose reads and maps
	// the kernel served from the version's backing file, and opens that
	// got that backing only for their maps (a writer or a reader of
	// another version while a passthrough reader was open).
	Passthrough       int64 `json:"passthrough"`
	PassthroughDirect int64 `json:"passthrough_direct"`
	// PassthroughWrite (option passthrough=write): writers whose writes
	// the kernel put in their staging file; PassthroughCopied: their
	// commits that published a copy, since the descriptor could still
	// write (fsync, or a copy of it open in another process).
	PassthroughWrite  int64 `json:"passthrough_write"`
	PassthroughCopied int64 `json:"passthrough_copied"`
	// RawFiles: files found to keep their own consistency (SQLite) and
	// served in place from then on; RawOpens: opens of such files.
	RawFiles int64 `json:"raw_files"`
	RawOpens int64 `json:"raw_opens"`
}

type counters struct {
	commits, rejected, killed, dropped, tooManyFiles, noSpace atomic.Int64
	unlockCommits                                             atomic.Int64
	rmwSessions, rmwWaits, rmwCycles, rmwGaveUp               atomic.Int64
	rmwWaitNanos, rmwReadOnly                                 atomic.Int64
	passthrough, passthroughDirect                            atomic.Int64
	passthroughWrite, passthroughCopied                       atomic.Int64
	versionFd                                                 atomic.Int64 // opens that took a node's descriptor (readerfd.go); tests only
	rawFiles, rawOpens                                        atomic.Int64
}

func (c *counters) snapshot() Stats {
	return Stats{Commits: c.commits.Load(), Rejected: c.rejected.Load(), Killed: c.killed.Load(),
		UnlockCommits: c.unlockCommits.Load(),
		Dropped:       c.dropped.Load(), TooManyFiles: c.tooManyFiles.Load(), NoSpace: c.noSpace.Load(),
		RMWSessions: c.rmwSessions.Load(), RMWWaits: c.rmwWaits.Load(), RMWCycles: c.rmwCycles.Load(), RMWGaveUp: c.rmwGaveUp.Load(),
		RMWWaitNanos: c.rmwWaitNanos.Load(), RMWReadOnly: c.rmwReadOnly.Load(), Passthrough: c.passthrough.Load(), PassthroughDirect: c.passthroughDirect.Load(),
		PassthroughWrite: c.passthroughWrite.Load(), PassthroughCopied: c.passthroughCopied.Load(),
		RawFiles: c.rawFiles.Load(), RawOpens: c.rawOpens.Load()}
}

// Stats returns the counts since the mount.
func (s *Server) Stats() Stats { return s.r.count.snapshot() }

// LogStats logs the counts since the mount (a "stats" line).
func (s *Server) LogStats() { s.r.logStats() }

func (r *root) logStats() {
	st := r.count.snapshot()
	r.log.Info("stats", zap.Int64("commits", st.Commits), zap.Int64("rejected", st.Rejected),
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
