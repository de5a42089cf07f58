package report

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/lockmgr"
	"github.com/safefs/safefs/rmw"
)

// A class that wrote writes; else it is read-only once judged, and
// learning until then. No classes: an empty list, not null.
func TestClasses(t *testing.T) {
	assert.Equal(t, []ClassStatus{}, Classes(nil))
	p := rmw.Pair{UID: 33, Path: "f", Cmd: "perl"}
	got := Classes([]rmw.ClassInfo{
		{Pair: p, Features: "GET a", Wrote: true, Reads: 1},
		{Pair: p, Features: "GET b", ReadOnly: true, Reads: 3},
		{Pair: p, Features: "GET c", Reads: 2},
	})
	require.Len(t, got, 3)
	assert.Equal(t, ClassStatus{Path: "f", UID: 33, Program: "perl", Class: "GET a", State: "writes", Reads: 1}, got[0])
	assert.Equal(t, "read-only", got[1].State)
	assert.Equal(t, "learning", got[2].State)
}

type names map[uint32]uint32 // thread → process

func (n names) Tgid(tid uint32) uint32    { return n[tid] }
func (n names) Cmdline(pid uint32) string { return fmt.Sprintf("prog%d", pid) }

// Sessions are listed by path, each with its holder and its waiters in
// order; a thread that is not its process's main one is named with its
// process.
func TestSessions(t *testing.T) {
	now := time.Now()
	tables := map[uint32][]rmw.SessionInfo{
		33: {{Key: 1, Holder: 11, Since: now.Add(-2 * time.Second), Open: 1,
			Waiters: []rmw.WaiterInfo{{ID: 20, Since: now.Add(-time.Second)}, {ID: 30, Since: now}}}},
		34: {{Key: 2, Holder: 40, Since: now}},
	}
	paths := map[uint64]string{1: "z", 2: "a"}
	got := Sessions(tables, func(k uint64) string { return paths[k] }, now, names{11: 10, 20: 20})
	require.Len(t, got, 2)
	assert.Equal(t, "a", got[0].Path)
	assert.Equal(t, Party{PID: 40, UID: 34, Cmdline: "prog40"}, got[0].Holder, "a process unknown: the thread as given")
	assert.Equal(t, []Party{}, got[0].Waiters)
	z := got[1]
	assert.Equal(t, Party{PID: 10, TID: 11, UID: 33, Cmdline: "prog10", For: 2}, z.Holder)
	assert.Equal(t, 1, z.Open)
	assert.Equal(t, []Party{{PID: 20, UID: 33, Cmdline: "prog20", For: 1}, {PID: 30, UID: 33, Cmdline: "prog30"}}, z.Waiters)
	assert.Equal(t, []SessionStatus{}, Sessions(nil, nil, now, names{}))
}

func TestSortWriters(t *testing.T) {
	w := []WriterStatus{{Path: "b", PID: 1}, {Path: "a", PID: 9}, {Path: "a", PID: 2}}
	SortWriters(w)
	assert.Equal(t, []WriterStatus{{Path: "a", PID: 2}, {Path: "a", PID: 9}, {Path: "b", PID: 1}}, w)
}

func TestKept(t *testing.T) {
	d := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(d, "u2-b"), []byte("12345"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(d, "u1-a"), nil, 0o600))
	fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	assert.Equal(t, []KeptFile{{Name: "u1-a"}, {Name: "u2-b", Bytes: 5}}, Kept(fd))
}

// Each error a commit fails with has its reason, wrapped or not.
func TestReason(t *testing.T) {
	for err, want := range map[error]string{
		lockmgr.ErrTooManyWaiters:                        ReasonQueueFull,
		fmt.Errorf("lease: %w", lockmgr.ErrFenced):       ReasonFenced,
		lockmgr.ErrUnavailable:                           ReasonCluster,
		lockmgr.ErrTimeout:                               ReasonLockTimeout,
		fmt.Errorf("wait: %w", context.DeadlineExceeded): ReasonLockTimeout,
		syscall.ESTALE:                                   ReasonStale,
		&os.PathError{Op: "write", Err: syscall.EIO}:     ReasonEIO,
		syscall.ENOSPC:                                   ReasonENOSPC,
		syscall.EDQUOT:                                   ReasonENOSPC,
		errors.New("something else"):                     ReasonOther,
		fmt.Errorf("rename: %w", syscall.EXDEV):          ReasonOther,
	} {
		assert.Equal(t, want, Reason(err), "%v", err)
	}
}

// The stats line carries every count.
func TestLogStats(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	LogStats(zap.New(core), Stats{Commits: 3, RMWWaitNanos: int64(time.Second), RawOpens: 7})
	require.Equal(t, 1, logs.Len())
	f := logs.All()[0].ContextMap()
	assert.Equal(t, "stats", logs.All()[0].Message)
	assert.EqualValues(t, 3, f["commits"])
	assert.Equal(t, time.Second, f["rmw_waited"])
	assert.EqualValues(t, 7, f["raw_opens"])
	assert.Len(t, f, 19)
}
