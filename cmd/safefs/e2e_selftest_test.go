package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/fs"
)

// TestMountRefusedWhenKillCheckFails: a daemon that cannot tell a killed
// writer (here: in a pid namespace of its own, reading the host's /proc,
// so the pids FUSE gives it name other processes) refuses to mount, with
// exit 7 and a message naming the way out; with kill_check=off it mounts.
func TestMountRefusedWhenKillCheckFails(t *testing.T) {
	requireFuse(t)
	requireRoot(t)
	unshare := requireTool(t, "unshare")
	backing, mnt := tempDir(t), tempDir(t)
	cmd := exec.Command(unshare, "--pid", "--fork", safefsBin, "mount", backing, mnt)
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "mounted although the self-test cannot pass:\n%s", out)
	assert.Equal(t, exitMount, cmd.ProcessState.ExitCode(), "%s", out)
	assert.Contains(t, string(out), "kill-check self-test failed")
	assert.Contains(t, string(out), "kill_check=off")
	mounts, err := os.ReadFile("/proc/self/mounts")
	require.NoError(t, err)
	assert.NotContains(t, string(mounts), " "+mnt+" ", "the refused mount was left behind")

	p := launchMount(t, exec.Command(unshare, "--pid", "--fork", safefsBin, "mount", "-o", "kill_check=off", backing, mnt), mnt)
	p.waitMounted(t)
	require.NoError(t, os.WriteFile(mnt+"/f", []byte("x"), 0o644))
	// unshare does not pass signals on: unmount from outside instead.
	require.NoError(t, unix.Unmount(mnt, 0))
	require.Equal(t, exitOK, p.exitCode(t), "stderr:\n%s", p.out)
	assert.False(t, strings.Contains(p.out.String(), "self-test"), "kill_check=off runs no self-test")
}

// TestSelfTestProbeOutOfReach: with BACKING owned by www-data, one byte
// written into the self-test's probe made every mount fail (exit 7).
// The daemon stops once its probe's writer is killed, and www-data
// writes into every probe there is, even one it could only know the name
// of: it reaches none, and the mount goes on.
func TestSelfTestProbeOutOfReach(t *testing.T) {
	requireFuse(t)
	requireRoot(t)
	backing, mnt := reachableDir(t), tempDir(t)
	chownWWW(t, backing)
	cmd := exec.Command(safefsBin, "mount", backing, mnt)
	cmd.Env = append(os.Environ(), stopEnv+"=selftest-killed")
	p := launchMount(t, cmd, mnt)
	waitLine(t, p.proc, "stop point reached")

	inBacking, err := filepath.Glob(filepath.Join(backing, ".safefs-selftest-*"))
	require.NoError(t, err)
	inside, err := filepath.Glob(filepath.Join(backing, fs.InternalDir, ".safefs-selftest-*"))
	require.NoError(t, err)
	var st unix.Stat_t
	if len(inside) == 1 {
		require.NoError(t, unix.Lstat(inside[0], &st))
	}
	args := []string{"--reuid=www-data", "--regid=www-data", "--clear-groups", "--",
		"/bin/sh", "-c", `for f in "$@"; do printf y 2>/dev/null >>"$f" && echo "wrote $f"; done; true`, "sh"}
	out, err := exec.Command(requireTool(t, "setpriv"), append(append(args, inBacking...), inside...)...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Empty(t, string(out), "www-data reached the probe")
	require.NoError(t, p.cmd.Process.Signal(unix.SIGCONT))
	p.waitMounted(t)

	assert.Empty(t, inBacking, "the probe is in BACKING")
	if assert.Len(t, inside, 1, "the probe is not in the internal directory") {
		assert.Equal(t, uint32(unix.S_IFREG|0o600), st.Mode, "the probe's mode")
		assert.Equal(t, uint32(0), st.Uid, "the probe's owner")
		assert.NoFileExists(t, inside[0], "the probe outlived the self-test")
	}
	stopMount(t, p)
}
