package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/safefs/safefs/testfs"
)

// Two daemons of one cluster over one BACKING, as two hosts: the unlock
// patterns of the contract suite (Perl, PHP and Python counters that
// release their lock before they close, and a reader that locks a
// descriptor it opened first), 8 processes through each host's own
// mount. An unlock publishes before etcd hands the lock over, and a
// grant on the other host learns the version published there before
// the holder reads: every increment is kept.
func TestClusterUnlockPatterns(t *testing.T) {
	clusterPrereqs(t)
	www := testfs.LookupUser(t, "www-data")
	e := startEtcd(t)
	backing := wwwReachable(t, tempDir(t))
	var dirs []string
	for _, node := range []string{"h1", "h2"} {
		mnt := filepath.Join(wwwReachable(t, tempDir(t)), "mnt")
		require.NoError(t, os.Mkdir(mnt, 0o755))
		startNodeWith(t, e, backing, mnt, node, []string{"allow_other"}, nil)
		dirs = append(dirs, filepath.Join(mnt, "data"))
	}
	require.NoError(t, os.Mkdir(dirs[0], 0o755))
	require.NoError(t, os.Chown(dirs[0], int(www.Uid), int(www.Gid)))
	testfs.RunUnlockPatterns(t, www, dirs...)
}

// wwwReachable opens dir and its parent to other users (t.TempDir is
// 0700): the scripts run as www-data.
func wwwReachable(t *testing.T, dir string) string {
	t.Helper()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		require.NoError(t, os.Chmod(d, 0o755))
	}
	return dir
}
