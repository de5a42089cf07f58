package testfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	safefs "github.com/safefs/safefs/fs"
)

// TestUnlockPatternsPlainDir proves the scripts: on a plain directory
// every pattern keeps every increment.
func TestUnlockPatternsPlainDir(t *testing.T) {
	www := LookupUser(t, "www-data")
	RunUnlockPatterns(t, www, PlainDir(t))
}

// TestContractUnlockBeforeClose: a script that releases its lock before
// it closes what it wrote (the PHP manual's flock example, flock(F, 8)
// in old Perl, fcntl F_UNLCK of the whole file or of a range, lockf,
// flock and OFD locks in Python, a separate lock file released before
// the data file is closed) finds its writes published when the lock is
// released, as on a local file system (contract 10); and a reader that
// locks a descriptor it opened before reads what the last holder wrote.
// Every increment is kept, with the default durability (full) and none.
func TestContractUnlockBeforeClose(t *testing.T) {
	t.Parallel() // heavy: see the package doc
	for _, durable := range []bool{true, false} {
		t.Run(map[bool]string{true: "durability=full", false: "durability=none"}[durable], func(t *testing.T) {
			m, www, dir := setup(t, func(o *safefs.Options) { o.Durable = durable })
			RunUnlockPatterns(t, www, dir)
			assert.Positive(t, m.Stats().UnlockCommits, "commits made at unlocks")
			NoPendingStaging(t, m)
		})
	}
}

// TestContractKilledLockHolder: a script killed by a signal while it
// holds a lock (flock or fcntl) and has rewritten the data file without
// closing it leaves the previous version (contract 7): the release of
// its lock, which its death makes, publishes nothing.
func TestContractKilledLockHolder(t *testing.T) {
	m, www, dir := setup(t)
	for _, method := range []string{"flock", "fcntl"} {
		t.Run(method, func(t *testing.T) {
			file, lock := filepath.Join(dir, method+".txt"), filepath.Join(dir, method+".lock")
			RunPerl(t, &www, "write.pl", file, ">", "0\n")
			RunPerl(t, &www, "write.pl", lock, ">", "")
			killed := m.Stats().Killed
			for range 5 {
				out, err := Perl{Script: "killed_locker.pl", As: &www, Args: []string{method, file, lock}}.Run()
				var exit *exec.ExitError
				require.ErrorAs(t, err, &exit, "the script kills itself: %s", out)
				require.Equal(t, syscall.SIGKILL, exit.Sys().(syscall.WaitStatus).Signal(), "killed by SIGKILL, not an error: %s", out)
			}
			data, err := os.ReadFile(file)
			require.NoError(t, err)
			assert.Equal(t, "0\n", string(data), "the killed writers' rewrites")
			assert.Equal(t, killed+5, m.Stats().Killed, "killed writers counted")
		})
	}
}
