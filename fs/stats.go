package fs

import (
	"sync/atomic"

	"github.com/safefs/safefs/internal/report"
)

// Stats counts what a mount did (package report).
type Stats = report.Stats

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

func (r *root) logStats() { report.LogStats(r.log, r.count.snapshot()) }
