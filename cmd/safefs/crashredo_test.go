package main

// A small durable commit is a redo record (fs/redo.go): its journal line
// carries the bytes and is the commit point; an append's bytes then reach
// the file, a rewrite's staging file is renamed in place, with no sync
// until a checkpoint (at most 1 s later) syncs them and ends the record.
// The daemon dies at each step, in the commit and in the checkpoint
// after it, and recovery must leave the file one whole version: the old
// one before the record's sync, the new one from then on.

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

// redoCheckpointPoints are the points in a checkpoint, which runs after
// the commit's close returned.
var redoCheckpointPoints = []string{"redo-synced", "redo-ended"}

// redoCrashPoints are the redo kinds' points: those of an append's and
// a rewrite's commit, and the checkpoint's.
func redoCrashPoints() []string {
	return slices.DeleteFunc(slices.Clone(fs.CrashPoints), func(p string) bool {
		return !strings.HasPrefix(p, "redo-") && !strings.HasPrefix(p, "rewrite-")
	})
}

func TestCrashRedo(t *testing.T) {
	requireFuse(t)
	requireRoot(t)
	requireTool(t, "perl")
	points := redoCrashPoints()
	require.NotEmpty(t, points)
	for _, kind := range []string{"redo", "rewrite"} {
		for _, point := range points {
			if strings.HasPrefix(point, kind+"-") || slices.Contains(redoCheckpointPoints, point) {
				t.Run(kind+"/"+point, func(t *testing.T) { testCrashRedo(t, kind, point) })
			}
		}
	}
}

func testCrashRedo(t *testing.T, kind, point string) {
	c, ok := crashCaseFor(kind)
	require.True(t, ok)
	require.Less(t, len(c.new), 8<<10, "a redo record's commit: under 8 KiB")
	backing, mnt := tempDir(t), tempDir(t)
	target := filepath.Join(backing, c.name)
	require.NoError(t, os.WriteFile(target, c.old, 0o640))
	require.NoError(t, os.Chown(target, 1234, 5678))
	var before syscall.Stat_t
	require.NoError(t, syscall.Stat(target, &before))

	p := startMountWith(t, backing, mnt, point)
	w := commitPerl(t, c.mode, filepath.Join(mnt, c.name), c.new, "")
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
	assert.Zero(t, s.RolledBack, "a redo record is never rolled back")
	made := point != "rewrite-carried" // the record was synced
	open := made && point != "redo-ended"
	assert.Equal(t, btoi(open), s.Completed, "the record is open from its sync until its checkpoint ends it")

	got, err := os.ReadFile(target)
	require.NoError(t, err)
	newVersion := c.new
	if kind == "redo" {
		newVersion = append(slices.Clip(c.old), c.new...)
	}
	versions := map[string][]byte{"the old version": c.old, "the new version": newVersion}
	want := "the new version"
	if !made {
		want = "the old version"
	}
	assert.Equal(t, want, describe(got, versions), "%s after a crash at %s and recovery", c.name, point)
	var now syscall.Stat_t
	require.NoError(t, syscall.Stat(target, &now))
	assert.Equal(t, [3]uint32{1234, 5678, syscall.S_IFREG | 0o640}, [3]uint32{now.Uid, now.Gid, now.Mode},
		"owner and mode kept")
	if kind == "redo" || !made {
		assert.Equal(t, before.Ino, now.Ino, "the old inode")
	}
	assertNoDebris(t, backing)
	requireRecoverNoop(t, backing)
}
