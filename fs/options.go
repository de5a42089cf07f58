package fs

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/safefs/safefs/lockmgr"
	"github.com/safefs/safefs/scriptlock"
)

// InternalDir is the name, at the top of BACKING, of the directory where
// safefs keeps its state: staging files, the journal, the lock file and
// rejected commits. It is invisible through the mount.
const InternalDir = ".safefs"

// Options configure a mount. The zero value is not valid: use DefaultOptions.
type Options struct {
	AllowOther  bool          // let other users in; default_permissions is always on
	ReadOnly    bool          // mount read-only
	LockTimeout time.Duration // how long a commit waits for its path's lock
	MaxWaiters  int           // commits that may wait for one path; more fail with EAGAIN
	Durable     bool          // durability=full: fsync staging, directory and journal
	KillCheck   bool          // a writer killed by a signal does not commit
	Debug       bool          // FUSE request trace
	Log         *zap.Logger   // nil: no logging
	// MaxFilesPerUser caps the files one non-root uid may hold open
	// through the mount (EMFILE beyond); 0: derived from the fd limit.
	MaxFilesPerUser int
	// RejectedMax and RejectedUserMax bound the bytes kept in rejected/,
	// in all and per writing uid; once full, a failed commit's bytes are
	// dropped (logged, counted) instead of kept. 0: the defaults.
	RejectedMax     int64
	RejectedUserMax int64
	// Observer is told of commits, rejections and recovery (metrics,
	// audit); nil: none.
	Observer Observer
	// Read-modify-write sessions (docs/design.md): RMWAuto learns the files and
	// programs that take them, RMWGlobs names files for every process;
	// neither: off. RMWHold is how long a session outlives its holder's
	// last close without a write; RMWWait the longest wait for one.
	RMWAuto  bool
	RMWGlobs []string
	RMWHold  time.Duration
	RMWWait  time.Duration
	// StagingPool is how many empty staging files are made ahead of the
	// opens that need them (O_TMPFILE); 0: each open creates its own.
	StagingPool int
	// Cluster: commit locks through etcd, shared with the other daemons
	// of the cluster (nil: not clustered). Set up by cmd/safefs
	// (a *cluster.Conn).
	Cluster Cluster
	// ScriptLocks decides flock and fcntl locks taken through the mount
	// (several hosts: etcd); nil: the daemon's own table (Memory),
	// unless KernelLocks.
	ScriptLocks scriptlock.Locker
	// KernelLocks: the kernel decides flock and fcntl locks, on one
	// kernel inode per file (no VersionCache). It does not tell the
	// daemon when a script unlocks, so a script that unlocks before it
	// closes loses updates (unlock.go): for measurements only.
	KernelLocks bool
	// Passthrough: a reader alone on a file's version is served by the
	// kernel from that version's backing file (passthrough.go).
	Passthrough bool
	// PassthroughWrite: with VersionCache and Passthrough, a write-only
	// truncating writer alone on its kernel node writes its staging
	// file through the kernel (ptwrite.go). Experimental, off by default.
	PassthroughWrite bool
	// VersionCache: a file's readers alone on a version read it through
	// the page cache of a kernel inode of that version (roles.go).
	// Needs script locks in the daemon: ScriptLocks is set if nil.
	VersionCache bool
	// AbsentCache: the kernel may keep a name's absence as long as a name
	// (1 s): a name made directly in BACKING shows within that. Not in a
	// cluster.
	AbsentCache bool
	// AppendPublish: the complete lines an O_APPEND descriptor writes are
	// published at most this long after they are written while it stays
	// open, and kept when its process is killed by a signal
	// (appendpub.go, docs/appenders.md); 0: published only at close,
	// fsync and unlock, and a killed appender keeps nothing unpublished.
	AppendPublish time.Duration
}

// DefaultOptions are the documented defaults of `safefs mount`.
func DefaultOptions() Options {
	return Options{
		LockTimeout:  10 * time.Second,
		MaxWaiters:   256,
		Durable:      true,
		KillCheck:    true,
		RMWAuto:      true,
		RMWHold:      time.Second,
		RMWWait:      3 * time.Second,
		StagingPool:  4,
		VersionCache: true,
		Passthrough:  true,
		AbsentCache:  true,

		AppendPublish: time.Second,
	}
}

// Cluster is what several daemons serving one BACKING share (package
// cluster, through etcd): commit locks, and the versions each daemon
// publishes. fs knows it only by this interface, so its build does not
// pull in etcd.
type Cluster interface {
	// Locks wraps the in-process manager m with the cluster's locks.
	Locks(m *lockmgr.Manager) lockmgr.Backend
	// Published is what the last commit of path below BACKING
	// published: inode numbers, the new one first.
	Published(ctx context.Context, path string) (string, error)
	Name() string            // the cluster's name
	Node() string            // this daemon's name in it
	LeaseTTL() time.Duration // how long its locks outlive it
}
