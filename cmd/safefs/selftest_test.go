package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
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
