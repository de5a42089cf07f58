package main

// A small durable append is a redo record (fs/redo.go): its journal line
// carries the bytes and is the commit point; the bytes reach the file
// with no fsync until a checkpoint (at most 1 s later) syncs them and
// ends the record. The daemon dies at each step, in the commit and in
// the checkpoint after it, and recovery must leave the append whole:
// from the record's fsync on, the commit is made.

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/safefs/safefs/fs"
)

// redoCheckpointPoints are a redo append's points in its checkpoint,
// which runs after the commit's close returned (fs/redo.go).
var redoCheckpointPoints = []string{"redo-synced", "redo-ended"}

// redoCrashPoints are the redo append's points, in its commit and in its
// checkpoint.
func redoCrashPoints() []string {
	return slices.DeleteFunc(slices.Clone(fs.CrashPoints), func(p string) bool { return !strings.HasPrefix(p, "redo-") })
}

func TestCrashRedo(t *testing.T) {
	requireFuse(t)
	requireRoot(t)
	requireTool(t, "perl")
	points := redoCrashPoints()
	require.NotEmpty(t, points)
	for _, point := range points {
		t.Run(point, func(t *testing.T) { testCrashRedo(t, point) })
	}
}

func testCrashRedo(t *testing.T, point string) {
	c, ok := crashCaseFor("redo")
	require.True(t, ok)
	old, data := c.old, c.new
	require.Less(t, len(data), 8<<10, "kept in memory: under 8 KiB")
	backing, mnt := tempDir(t), tempDir(t)
	target := filepath.Join(backing, c.name)
	require.NoError(t, os.WriteFile(target, old, 0o640))
	require.NoError(t, os.Chown(target, 1234, 5678))
	var before syscall.Stat_t
	require.NoError(t, syscall.Stat(target, &before))

	p := startMountWith(t, backing, mnt, point)
	w := commitPerl(t, c.mode, filepath.Join(mnt, c.name), data, "")
	waitKilled(t, p)
	assert.Contains(t, p.out.String(), "crash point reached", "the daemon died, but not at its crash point")
	unmountIfMounted(t, mnt)
	out := w.wait(t)
	checkpoint := slices.Contains(redoCheckpointPoints, point) // after the commit: its close returned
	if checkpoint {
		assert.Contains(t, out, "close ok", "the commit was made before its checkpoint")
	} else {
		assert.NotContains(t, out, "close ok", "close returned success though the daemon died during the commit")
	}

	s := recoverBacking(t, backing)
	t.Logf("recover after %s: %+v", point, s)
	assert.Zero(t, s.Refused, "recovery refused something")
	ended := point == "redo-ended"
	assert.Equal(t, btoi(!ended), s.Completed, "the record is open until its checkpoint ends it")
	assert.Zero(t, s.RolledBack, "a redo record is never rolled back")

	got, err := os.ReadFile(target)
	require.NoError(t, err)
	versions := map[string][]byte{"the old version": old, "old+new": append(slices.Clip(old), data...)}
	assert.Equal(t, "old+new", describe(got, versions), "%s after a crash at %s and recovery", c.name, point)
	var now syscall.Stat_t
	require.NoError(t, syscall.Stat(target, &now))
	assert.Equal(t, [3]uint64{before.Ino, uint64(before.Uid), uint64(before.Gid)},
		[3]uint64{now.Ino, uint64(now.Uid), uint64(now.Gid)}, "appended in place, owner kept")
	assertNoDebris(t, backing)
	requireRecoverNoop(t, backing)
}
