package fs

import (
	"errors"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
	"github.com/safefs/safefs/internal/dirfds"
	"github.com/safefs/safefs/internal/epoch"
	"github.com/safefs/safefs/internal/estale"
	"github.com/safefs/safefs/internal/limits"
	"github.com/safefs/safefs/internal/lockbook"
	"github.com/safefs/safefs/internal/loglimit"
	"github.com/safefs/safefs/internal/redo"
	"github.com/safefs/safefs/internal/rmwstate"
	"github.com/safefs/safefs/internal/staging"
	"github.com/safefs/safefs/journal"
	"github.com/safefs/safefs/lockmgr"
)

// root is the state of one mount.
type root struct {
	rootfd     int      // BACKING, O_PATH
	internal   *os.File // BACKING/.safefs, checked to be the daemon's own
	stagingfd  int      // its parts, O_PATH
	undofd     int
	rejectedfd int
	// internalPath is for messages: everything in it is reached by fd.
	internalPath string
	mountpoint   string // absolute
	// mntID is the mount's ID, as /proc/<pid>/fdinfo shows it
	// (proc.HoldsOpen); 0 until known.
	mntID atomic.Int64
	// conn is the FUSE connection (its device minor, fusectl's name);
	// abandoned: it was ended under writers of another mount namespace
	// (unmount.go).
	conn      uint32
	abandoned atomic.Bool

	top     *file
	topNode *gofs.Inode // the top's node: names' paths end there (rel)
	ids     *ids
	locks   lockmgr.Backend
	jr      *journal.Journal
	opts    Options
	log     *zap.Logger
	crashAt string // test-only crash point, from SAFEFS_CRASH_AT
	stopAt  string // test-only SIGSTOP point, from SAFEFS_STOP_AT
	// testLeaseWait: test-only, from SAFEFS_TEST_LEASE_WAIT: how long a
	// commit waits under its lock for a lease (see named.reopen).
	testLeaseWait time.Duration
	// atPoint: test-only, called at each point (in-process tests).
	atPoint   atomic.Pointer[func(point string)]
	count     counters
	readerFds keptFds // reader nodes' version descriptors (readerfd.go)
	// selfTestSeen: the kill-check self-test's probe was seen killed.
	selfTestSeen atomic.Bool
	// probe is the self-test's probe's name while it runs (selftest.go).
	probe atomic.Pointer[string]
	// changes of names begun and ended, for lookups
	changes epoch.Changes
	files   *limits.Files
	space   limits.Space // roomFor's last statfs
	dirs    dirfds.Cache
	kept    *limits.Kept // what rejected/ holds, per writing uid
	// rejectLog bounds the lines logged for rejected commits.
	rejectLog   loglimit.Limit
	leaseLog    loglimit.Limit  // and those for requests another's lease refused (lease.go)
	rmw         *rmwstate.State // nil: read-modify-write sessions off
	pool        *staging.Pool
	appendBufs  appendBuffers                 // pending appends kept in memory (appendbuf.go)
	redo        redo.Queue[key]               // redo records awaiting their checkpoint (redo.go)
	ckMu        sync.Mutex                    // one checkpoint at a time
	book        lockbook.Book[*file, *handle] // script locks held through this daemon (locks.go)
	openWriters writerSet                     // open writers by process, for unlocks (unlock.go)
	pt          ptRoot                        // passthrough (passthrough.go)
	cands       candidates                    // nodes made by requests in progress (candidates.go)
	refused     estale.Refusals               // opens answered ESTALE, whose retry passes
	// writesUncache: the kernel drops an inode's cached size and times
	// at each write(2) itself (FUSE 7.35, Linux 5.16; see uncache).
	writesUncache atomic.Bool
}

// crash kills the daemon at a named step of a commit, for crash tests
// (SAFEFS_CRASH_AT=<point> in the daemon's environment), or stops it
// (SAFEFS_STOP_AT; also at points that are not in CrashPoints).
func (r *root) crash(point string) {
	if at := r.atPoint.Load(); at != nil {
		(*at)(point)
	}
	if r.stopAt == point {
		r.log.Warn("stop point reached: SIGSTOP", zap.String("point", point))
		_ = r.log.Sync()
		stopHere()
	}
	if r.crashAt == point {
		r.log.Warn("crash point reached: SIGKILL", zap.String("point", point))
		_ = r.log.Sync()
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}

// stopHere stops the daemon before this goroutine runs on. A SIGSTOP
// sent to the process reaches some thread, which then stops the others:
// this one could still make the next step (a test saw it send its fence
// request first). Sent to this thread, the stop takes it on its way
// back from the system call.
func stopHere() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = unix.Tgkill(os.Getpid(), unix.Gettid(), syscall.SIGSTOP)
}

// CrashPoints are the steps of a commit where SAFEFS_CRASH_AT can kill
// the daemon, in commit order for each kind.
var CrashPoints = []string{
	"replace-before-rename", "replace-after-rename", "replace-dir-synced",
	"inplace-undo-saved", "inplace-begun", "inplace-truncated", "inplace-written", "inplace-ended",
	"append-begun", "append-half", "append-written", "append-synced", "append-ended",
	// A redo append's (redo.go): synced and ended at its checkpoint.
	"redo-begun", "redo-half", "redo-written", "redo-synced", "redo-ended",
}

// dropTemp closes and removes a staging or undo file (one without a
// name, nm "", goes with its close).
func (r *root) dropTemp(dir int, f *os.File, nm string) {
	f.Close()
	if nm == "" {
		return
	}
	if err := backing.UnlinkAt(dir, nm, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		r.log.Warn("could not remove temp file", zap.String("name", nm), zap.Error(err))
	}
}

// forget drops a logical file the kernel no longer knows, unless a
// lookup made it a node again since its last node's forget (live: the
// two reach the daemon at once), or, until it may no longer come, an
// open sent to a new node is on its way.
func (r *root) forget(f *file) {
	if f == r.top {
		return
	}
	f.mu.Lock()
	idle := len(f.handles) == 0 && f.roles.live <= 0
	wait := f.moving()
	gone := idle && wait == 0
	if gone {
		r.ids.drop(f)
	} else if idle {
		// Only a move's retry may still come: look again after it.
		time.AfterFunc(wait, func() { r.forget(f) })
	}
	f.mu.Unlock()
	if gone {
		f.dropGhost()
		if r.rmw != nil {
			// Its number may name another file next: a read of this
			// one must not make that one's first write look like a
			// read-modify-write.
			r.rmw.Forget(f.ino)
		}
	}
}

func (f *file) ver() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.version
}

func (f *file) bump() {
	f.mu.Lock()
	f.version++
	f.mu.Unlock()
}
