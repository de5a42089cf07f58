// Package report is what a mount tells its operator: the snapshot
// `safefs status` shows (Status), the counts since the mount (Stats),
// its levels (Gauges) and the events an Observer is told of, with the
// rules that render them from plain values (session tables, request
// classes, errors). fs fills them from its own objects and names these
// types as its own.
package report

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

// Stats counts what a mount did, for the operator: logged at unmount,
// and read by fs.Server.Stats.
type Stats struct {
	Commits  int64 `json:"commits"`  // pending versions published
	Rejected int64 `json:"rejected"` // commits that could not be made: bytes kept in rejected/
	Killed   int64 `json:"killed"`   // closes by writers killed by a signal: not committed
	// UnlockCommits: commits made when a script released a lock before
	// closing what it wrote (fs/unlock.go); also counted in Commits.
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

// Gauges are levels of a mount, read when asked (a scrape).
type Gauges struct {
	OpenHandles int // files open through the mount
	// KnownFiles: logical files in the daemon's tables (the kernel has a
	// node of each, or an open is on its way to one): falls back when
	// the kernel forgets, so steady growth is a leak.
	KnownFiles   int
	PendingBytes int64 // bytes of pending versions (staging files of open handles)
	// RejectedFiles and RejectedBytes are what rejected/ holds as counted
	// against rejected_max: since the mount, files the operator removes
	// meanwhile are counted until the next mount. Bytes are disk use.
	RejectedFiles int64
	RejectedBytes int64
	// RMWHeld: read-modify-write sessions held; RMWWaiting: opens
	// waiting for one.
	RMWHeld, RMWWaiting int
}
