package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// startDaemonLocks starts one daemon with locks=daemon; both of the
// pair's mounts are its mount.
func startDaemonLocks(t *testing.T) *lockPair {
	t.Helper()
	requireFuse(t)
	requireRoot(t)
	requirePerl(t)
	b, m := tempDir(t), tempDir(t)
	d := launchMount(t, exec.Command(safefsBin, "mount", "-o", "locks=daemon,rmw=off", b, m), m)
	d.waitMounted(t)
	require.NoError(t, os.WriteFile(filepath.Join(m, "lk"), nil, 0o644))
	return &lockPair{mnt: [2]string{m, m}, d: [2]*mountProc{d, d}}
}

// locks=daemon, the real daemon: a holder killed with SIGKILL releases
// its lock to a waiter (the kernel's unlock at close or release reaches
// the daemon), and a wait interrupted by a signal ends with EINTR and
// leaves nothing held.
func TestDaemonLocksKilledAndInterrupted(t *testing.T) {
	for _, how := range []string{"flock", "fcntl"} {
		t.Run(how, func(t *testing.T) {
			lp := startDaemonLocks(t)
			w := handOver(t, how, lp)
			waitOut(t, interrupted(t, how, lp.mnt[0]), "EINTR")
			kill(t, w)
			require.Equal(t, "ok", tryLock(t, how+"_nb", lp.mnt[0]), "a killed holder or an interrupted wait left a lock behind")
		})
	}
}
