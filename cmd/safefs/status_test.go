package main

// `safefs status` against the real daemon while a commit is blocked: the
// holder's append commit is held on A's lock by a read lease (as in
// observe_test.go), a second appender's commit waits behind it, and a
// third writer has pending bytes on B.

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/fs"
)

// statusJSON runs `safefs status --json target` and parses it.
func statusJSON(t *testing.T, target string) fs.Status {
	t.Helper()
	r := runSafefs(t, nil, "status", target, "--json")
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	var st fs.Status
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st), "output: %s", r.stdout)
	return st
}

// statusUntil polls until cond holds (the deadline only guards a hang).
func statusUntil(t *testing.T, target string, cond func(fs.Status) bool) fs.Status {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		st := statusJSON(t, target)
		if cond(st) {
			return st
		}
		require.False(t, time.Now().After(deadline), "status never matched; last: %+v", st)
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStatusWhileCommitBlocked(t *testing.T) {
	requireFuse(t)
	requireRoot(t)
	requireTool(t, "perl")
	backing, mnt := tempDir(t), tempDir(t)
	t.Setenv("SAFEFS_TEST_LEASE_WAIT", "10m") // the lease holds the commit (observe_test.go)
	p := launchMount(t, exec.Command(safefsBin, "mount", "-o", "lock_timeout=10m", backing, mnt), mnt)
	p.waitMounted(t)
	_, err := os.Stat(filepath.Join(backing, fs.InternalDir, statusSock))
	require.NoError(t, err, "no status socket while mounted")

	a, b := filepath.Join(mnt, "A"), filepath.Join(mnt, "B")
	commitOK(t, "replace", a, []byte("base\n"))
	hold, waitData, bData := []byte("holder's line\n"), []byte("waiter's line\n"), []byte("pending on B\n")
	holder := startPausedCommit(t, "append", a, hold, "close")
	waiter := startPausedCommit(t, "append", a, waitData, "close")
	other := startPausedCommit(t, "replace", b, bData, "close")
	commitOK(t, "replace", a, []byte("pivot\n")) // a version none of them holds open
	lease := takeLease(t, filepath.Join(backing, "A"))
	_, err = io.WriteString(holder.stdin, "go\n")
	require.NoError(t, err)
	closeStdin(t, holder.stdin)
	waitLeaseBreak(t, lease)
	_, err = io.WriteString(waiter.stdin, "go\n")
	require.NoError(t, err)
	closeStdin(t, waiter.stdin)

	st := statusUntil(t, mnt, func(s fs.Status) bool { return len(s.Locks) == 1 && len(s.Locks[0].Waiters) == 1 })
	hp, wp, op := uint32(holder.p.cmd.Process.Pid), uint32(waiter.p.cmd.Process.Pid), uint32(other.p.cmd.Process.Pid)
	l := st.Locks[0]
	assert.Equal(t, "A", l.Path)
	assert.Equal(t, hp, l.Holder.PID, "holder pid")
	assert.Equal(t, uint32(0), l.Holder.UID)
	assert.Contains(t, l.Holder.Cmdline, "commit.pl append "+a)
	assert.Equal(t, wp, l.Waiters[0].PID, "waiter pid")
	assert.Contains(t, l.Waiters[0].Cmdline, "commit.pl append "+a)
	assert.GreaterOrEqual(t, l.Holder.For, l.Waiters[0].For, "the holder held before the waiter waited")
	assert.ElementsMatch(t, []fs.WriterStatus{
		{Path: "A", PID: hp, Cmdline: l.Holder.Cmdline, PendingBytes: int64(len(hold))},
		{Path: "A", PID: wp, Cmdline: l.Waiters[0].Cmdline, PendingBytes: int64(len(waitData))},
		{Path: "B", PID: op, Cmdline: "perl " + testdataPath(t, "commit.pl") + " replace " + b + " " + srcOf(t, other) + " close", PendingBytes: int64(len(bData))},
	}, st.Writers)
	assert.Equal(t, int64(2), st.Counters.Commits)

	// Text mode, asked by BACKING this time.
	r := runSafefs(t, nil, "status", backing)
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	for _, want := range []string{"commit locks held: 1", "  A\n", "holder    pid " + strconv.Itoa(int(hp)),
		"waiter 1  pid " + strconv.Itoa(int(wp)), "open writers: 3", "pending " + strconv.Itoa(len(bData)) + " bytes",
		"rejected/: 0 files", "counters: commits 2,"} {
		assert.Contains(t, r.stdout, want)
	}

	_, err = unix.FcntlInt(lease.Fd(), unix.F_SETLEASE, unix.F_UNLCK)
	require.NoError(t, err)
	holder.p.wait(t)
	waiter.p.wait(t)
	assert.Contains(t, holder.out.String(), "close ok")
	assert.Contains(t, waiter.out.String(), "close ok")
	require.Contains(t, other.finish(t), "close ok")
	st = statusUntil(t, mnt, func(s fs.Status) bool { return len(s.Writers) == 0 })
	assert.Empty(t, st.Locks)
	assert.Equal(t, int64(5), st.Counters.Commits)
	stopMount(t, p)
	_, err = os.Stat(filepath.Join(backing, fs.InternalDir, statusSock))
	assert.ErrorIs(t, err, os.ErrNotExist, "the socket outlived the mount")
}

// srcOf is the SRC argument commit.pl was started with.
func srcOf(t *testing.T, c *pausedCommit) string {
	t.Helper()
	args := c.p.cmd.Args
	return args[len(args)-2]
}

func TestStatusNotSafefs(t *testing.T) {
	dir := tempDir(t)
	r := runSafefs(t, nil, "status", dir)
	assert.Equal(t, exitNotSafefs, r.code)
	assertOneLine(t, r.stderr, "is not a safefs mount or BACKING")
	r = runSafefs(t, nil, "status")
	assert.Equal(t, exitUsage, r.code)
}

// worldBin copies the binary where another user can run it.
func worldBin(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "safefs-status-bin-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	data, err := os.ReadFile(safefsBin)
	require.NoError(t, err)
	bin := filepath.Join(dir, "safefs")
	require.NoError(t, os.WriteFile(bin, data, 0o755))
	return bin
}

func runAs(t *testing.T, user string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(requireTool(t, "setpriv"), append([]string{"--reuid=" + user, "--regid=" + user, "--clear-groups", "--"}, args...)...)
	out, err := cmd.Output()
	require.Empty(t, string(out))
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	return ee.ExitCode(), string(ee.Stderr)
}

// TestStatusNonRoot: a non-root caller is stopped by the 0700 internal
// directory, and by the daemon's SO_PEERCRED check where the socket is
// reachable.
func TestStatusNonRoot(t *testing.T) {
	requireFuse(t)
	requireRoot(t)
	bin := worldBin(t)
	backing, mnt := tempDir(t), tempDir(t)
	p := startMount(t, backing, mnt)
	code, stderr := runAs(t, "www-data", bin, "status", mnt)
	assert.Equal(t, exitStatusDenied, code)
	assertOneLine(t, stderr, "permission denied")
	stopMount(t, p)

	// The peer check alone: a socket anyone may connect to.
	fake, err := os.MkdirTemp("", "safefs-status-fake-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(fake) })
	require.NoError(t, os.Chmod(fake, 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(fake, fs.InternalDir), 0o755))
	dir, err := os.Open(filepath.Join(fake, fs.InternalDir))
	require.NoError(t, err)
	defer dir.Close()
	s, err := startStatus(dir, nil, zap.NewNop()) // no Server: it must not be asked
	require.NoError(t, err)
	defer s.close()
	require.NoError(t, os.Chmod(statusSockPath(fake), 0o666))
	code, stderr = runAs(t, "www-data", bin, "status", fake)
	assert.Equal(t, exitStatusDenied, code)
	assertOneLine(t, stderr, "root only")
}
