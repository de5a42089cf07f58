package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/safefs/safefs/testfs"
)

// umountFromOutside unmounts the way an administrator would.
func umountFromOutside(t *testing.T, mnt string) {
	t.Helper()
	if os.Geteuid() == 0 {
		require.NoError(t, syscall.Unmount(mnt, 0))
		return
	}
	out, err := exec.Command("fusermount3", "-u", mnt).CombinedOutput()
	require.NoError(t, err, "fusermount3 -u: %s", out)
}

func TestMountLifeCycle(t *testing.T) {
	tests := []struct {
		name string
		stop func(t *testing.T, p *mountProc, mnt string)
	}{
		{"SIGTERM", func(t *testing.T, p *mountProc, _ string) { require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM)) }},
		{"SIGINT", func(t *testing.T, p *mountProc, _ string) { require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT)) }},
		{"umount from outside", func(t *testing.T, _ *mountProc, mnt string) { umountFromOutside(t, mnt) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			requireFuse(t)
			backing, mnt := tempDir(t), tempDir(t)
			p := startMount(t, backing, mnt)

			fstype, ok := mountType(t, mnt)
			require.True(t, ok, "%s not in /proc/mounts after the mounted line", mnt)
			assert.Equal(t, "fuse.safefs", fstype)

			require.NoError(t, os.WriteFile(filepath.Join(mnt, "hello.txt"), []byte("hello\n"), 0o644))
			got, err := os.ReadFile(filepath.Join(backing, "hello.txt"))
			require.NoError(t, err)
			assert.Equal(t, "hello\n", string(got))

			tt.stop(t, p, mnt)
			assert.Equal(t, exitOK, p.exitCode(t), "stderr:\n%s", p.out)
			_, ok = mountType(t, mnt)
			assert.False(t, ok, "%s still mounted after safefs exited", mnt)
		})
	}
}

func TestMountBusyBacking(t *testing.T) {
	requireFuse(t)
	backing, mnt := tempDir(t), tempDir(t)
	p := startMount(t, backing, mnt)

	t.Run("second mount", func(t *testing.T) {
		mnt2 := tempDir(t)
		t.Cleanup(func() { unmountIfMounted(t, mnt2) })
		r := runSafefs(t, nil, "mount", backing, mnt2)
		assert.Equal(t, exitBusy, r.code, r.stderr)
		assert.Contains(t, r.stderr, "already served")
	})
	t.Run("recover", func(t *testing.T) {
		r := runSafefs(t, nil, "recover", backing)
		assert.Equal(t, exitBusy, r.code, r.stderr)
		assert.Contains(t, r.stderr, "already served")
	})

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, exitOK, p.exitCode(t), "stderr:\n%s", p.out)
}

func TestRefuseMountedMountpoint(t *testing.T) {
	tests := []struct {
		name  string
		mount func(t *testing.T, dir string)
		want  string
	}{
		{"tmpfs", mountTmpfs, "already a mount point"},
		{"stale FUSE mount", mountStaleFuse, "umount -l"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			requireRoot(t)
			backing, mnt := tempDir(t), tempDir(t)
			tt.mount(t, mnt)
			t.Cleanup(func() { unmountIfMounted(t, mnt) })
			r := runSafefs(t, nil, "mount", backing, mnt)
			assert.Equal(t, exitMounted, r.code, r.stderr)
			assertOneLine(t, r.stderr, tt.want)
		})
	}
}

func mountTmpfs(t *testing.T, dir string) {
	err := syscall.Mount("none", dir, "tmpfs", 0, "")
	if errors.Is(err, syscall.EPERM) {
		t.Skip("mount not permitted here (no CAP_SYS_ADMIN)")
	}
	require.NoError(t, err)
}

// mountStaleFuse makes the mount a dead FUSE server leaves behind: mount
// with a /dev/fuse descriptor, then close it, which aborts the connection
// so that stat fails with ENOTCONN.
func mountStaleFuse(t *testing.T, dir string) {
	requireFuse(t)
	fd, err := syscall.Open("/dev/fuse", syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	require.NoError(t, err)
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0", fd)
	err = syscall.Mount("safefs-test", dir, "fuse", 0, opts)
	syscall.Close(fd)
	if errors.Is(err, syscall.EPERM) {
		t.Skip("mount not permitted here (no CAP_SYS_ADMIN)")
	}
	require.NoError(t, err)
	_, err = os.Stat(dir)
	require.ErrorIs(t, err, syscall.ENOTCONN, "the test mount is not stale")
}

// TestMountAsNonRoot: a non-root user mounts with fusermount3; new files
// are that user's. Containers that do not honour fusermount3's set-uid
// bit cannot do this at all: the test says so and skips.
func TestMountAsNonRoot(t *testing.T) {
	requireFuse(t)
	requireTool(t, "fusermount3")
	www := testfs.LookupUser(t, "www-data")
	dir := tempDir(t)
	for _, d := range []string{dir, filepath.Dir(dir)} { // t.TempDir is 0700
		require.NoError(t, os.Chmod(d, 0o755))
	}
	bin, backing, mnt := filepath.Join(dir, "safefs"), filepath.Join(dir, "b"), filepath.Join(dir, "m")
	copyFile(t, safefsBin, bin)
	require.NoError(t, os.Chmod(bin, 0o755))
	for _, d := range []string{backing, mnt} {
		require.NoError(t, os.Mkdir(d, 0o755))
		require.NoError(t, os.Chown(d, int(www.Uid), int(www.Gid)))
	}
	p := launchMount(t, testfs.AsUser(exec.Command(bin, "mount", backing, mnt), www), mnt)
	select {
	case <-p.mounted:
	case <-p.exited:
		if strings.Contains(p.out.String(), "failed to open /dev/fuse") {
			t.Skipf("fusermount3 cannot open /dev/fuse for a non-root user here (set-uid not honoured):\n%s", p.out)
		}
		t.Fatalf("safefs mount as www-data exited (%v):\n%s", p.waitErr, p.out)
	case <-time.After(mountLimit):
		t.Fatalf("no \"mounted\" line after %v:\n%s", mountLimit, p.out)
	}
	out, err := testfs.AsUser(exec.Command("sh", "-c", `echo hi > "$1/x" && cat "$1/x"`, "sh", mnt), www).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, "hi\n", string(out))
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(filepath.Join(backing, "x"), &st))
	assert.Equal(t, www.Uid, st.Uid, "owner of the new file")
	stopMount(t, p)
	_, ok := mountType(t, mnt)
	assert.False(t, ok, "%s still mounted after safefs exited", mnt)
}

// TestMountStatsOnSIGUSR1: SIGUSR1 logs the counters and the mount goes on.
func TestMountStatsOnSIGUSR1(t *testing.T) {
	requireFuse(t)
	backing, mnt := tempDir(t), tempDir(t)
	p := startMount(t, backing, mnt)
	require.NoError(t, os.WriteFile(filepath.Join(mnt, "f"), []byte("x"), 0o644))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGUSR1))
	line := waitOutput(t, p.proc, "\tstats\t")
	assert.Contains(t, line, `"commits": 1`)
	_, ok := mountType(t, mnt)
	assert.True(t, ok, "still mounted after SIGUSR1")
	stopMount(t, p)
}

// waitOutput waits for a line of the process's output holding s.
func waitOutput(t *testing.T, p *proc, s string) string {
	t.Helper()
	for deadline := time.Now().Add(waitLimit); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for line := range strings.Lines(p.out.String()) {
			if strings.Contains(line, s) {
				return line
			}
		}
	}
	t.Fatalf("no line with %q after %v:\n%s", s, waitLimit, p.out)
	return ""
}
