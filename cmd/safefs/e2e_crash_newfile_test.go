package main

// A new file's first commit with durability=none is an append to the
// empty file its create made (fs/appendbuf.go): the daemon dies at each
// append crash point of that commit, and recovery must leave the file
// empty (as created) or whole, never torn, with nothing left over.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCrashNewFile(t *testing.T) {
	requireFuse(t)
	requireRoot(t)
	requireTool(t, "perl")
	for _, point := range []string{"append-begun", "append-half", "append-written", "append-synced", "append-ended"} {
		t.Run(point, func(t *testing.T) { testCrashNewFile(t, point) })
	}
}

func testCrashNewFile(t *testing.T, point string) {
	backing, mnt := tempDir(t), tempDir(t)
	data := testVersion("new", 60) // kept in memory until the commit: under 8 KiB
	require.Less(t, len(data), 8<<10)

	t.Setenv(crashEnv, point)
	p := launchMount(t, exec.Command(safefsBin, "mount", "-o", "durability=none", backing, mnt), mnt)
	p.waitMounted(t)
	t.Setenv(crashEnv, "")
	w := commitPerl(t, "replace", filepath.Join(mnt, "new.txt"), data, "")
	waitKilled(t, p)
	assert.Contains(t, p.out.String(), "crash point reached", "the daemon died, but not at its crash point")
	unmountIfMounted(t, mnt)
	assert.NotContains(t, w.wait(t), "close ok", "close returned success though the daemon died during the commit")

	target := filepath.Join(backing, "new.txt")
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(target, &st), "the create made the file before the commit")
	s := recoverBacking(t, backing)
	t.Logf("recover after %s: %+v", point, s)
	assert.Zero(t, s.Refused, "recovery refused something")

	got, err := os.ReadFile(target)
	require.NoError(t, err)
	versions := map[string][]byte{"empty": {}, "the new version": data}
	want := []string{"empty"}
	if after(point, "append-written") {
		want = append(want, "the new version") // all bytes there: kept once their CRC verifies
	}
	if strings.HasSuffix(point, "-ended") {
		want = []string{"the new version"}
	}
	assert.Contains(t, want, describe(got, versions), "new.txt after a crash at %s and recovery", point)
	var now syscall.Stat_t
	require.NoError(t, syscall.Stat(target, &now))
	assert.Equal(t, st.Ino, now.Ino, "written in place: the inode the create made")
	assertNoDebris(t, backing)
	requireRecoverNoop(t, backing)
}
