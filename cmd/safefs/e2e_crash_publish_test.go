package main

// A long-lived appender's lines are published while it keeps its
// descriptor open (fs/appendpub.go): each publish is an append commit
// like a close's, with its journal record. The daemon dies at each step
// of such a publish (the appender never closes), and recovery must
// leave the file at the old version or the old version followed by the
// complete lines, never the partial last line the publish held back.

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/safefs/safefs/fs"
)

func TestCrashAppendPublish(t *testing.T) {
	requireFuse(t)
	requireRoot(t)
	requireTool(t, "perl")
	for _, point := range fs.CrashPoints {
		if strings.HasPrefix(point, "append-") || strings.HasPrefix(point, "redo-") {
			t.Run(point, func(t *testing.T) { testCrashAppendPublish(t, point) })
		}
	}
}

func testCrashAppendPublish(t *testing.T, point string) {
	kind, _, _ := strings.Cut(point, "-")
	c, ok := crashCaseFor(kind) // append: staged (over 8 KiB); redo: kept in memory
	require.True(t, ok)
	const partial = "a partial last line, never published"
	backing, mnt := tempDir(t), tempDir(t)
	target := filepath.Join(backing, c.name)
	require.NoError(t, os.WriteFile(target, c.old, 0o640))
	require.NoError(t, os.Chown(target, 1234, 5678))
	var before syscall.Stat_t
	require.NoError(t, syscall.Stat(target, &before))

	p := startMountWith(t, backing, mnt, point)
	// The appender writes its lines and a partial one, then waits before
	// its close, which never comes: only the publish commits.
	src := filepath.Join(t.TempDir(), "src")
	require.NoError(t, os.WriteFile(src, append(slices.Clip(c.new), partial...), 0o600))
	cmd := exec.Command("perl", testdataPath(t, "commit.pl"), "append", filepath.Join(mnt, c.name), src, "close")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	t.Cleanup(func() { stdin.Close() })
	w := startProc(t, cmd)
	waitKilled(t, p)
	assert.Contains(t, p.out.String(), "crash point reached", "the daemon died, but not at its crash point")
	unmountIfMounted(t, mnt)
	assert.Equal(t, "open ok\nwrite ok\npause close\n", w.out.String(), "the appender was waiting before its close")

	s := recoverBacking(t, backing)
	t.Logf("recover after %s: %+v", point, s)
	assert.Zero(t, s.Refused, "recovery refused something")
	got, err := os.ReadFile(target)
	require.NoError(t, err)
	versions := map[string][]byte{"the old version": c.old, "old+lines": append(slices.Clip(c.old), c.new...),
		"old+lines+partial": append(append(slices.Clip(c.old), c.new...), partial...)}
	want := []string{"old+lines"}
	if kind == "append" && !after(point, "append-written") {
		want = []string{"the old version"}
	} else if kind == "append" && !strings.HasSuffix(point, "-ended") {
		want = append(want, "the old version")
	}
	assert.Contains(t, want, describe(got, versions), "%s after a crash at %s during a publish, and recovery", c.name, point)
	var now syscall.Stat_t
	require.NoError(t, syscall.Stat(target, &now))
	assert.Equal(t, [3]uint64{before.Ino, uint64(before.Uid), uint64(before.Gid)},
		[3]uint64{now.Ino, uint64(now.Uid), uint64(now.Gid)}, "appended in place, owner kept")
	assertNoDebris(t, backing)
	requireRecoverNoop(t, backing)
}
