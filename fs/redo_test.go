package fs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/safefs/safefs/internal/redo"
)

// A small durable append's record carries its bytes and stays open until
// its checkpoint, at most redo.Delay later, which syncs the file and ends
// it; the unmount checkpoints too, so the journal closes empty.
func TestRedoCheckpoint(t *testing.T) {
	srv, backing, mnt := mountForTest(t)
	r := srv.r
	p := filepath.Join(mnt, "log")
	appendLine(t, p, "one\n")
	appendLine(t, p, "two\n")
	require.True(t, r.redo.Len() > 0, "the appends wait for their checkpoint")
	jpath := filepath.Join(backing, InternalDir, "journal")
	j, err := os.ReadFile(jpath)
	require.NoError(t, err)
	assert.Contains(t, string(j), `"kind":"redo"`, "a redo record")
	assert.Contains(t, string(j), `"data":"dHdvCg=="`, "the record carries the bytes (base64 of two\\n)")
	require.Eventually(t, func() bool { return r.redo.Len() == 0 }, 5*redo.Delay, 10*time.Millisecond,
		"no checkpoint within %v", 5*redo.Delay)
	appendLine(t, p, "three\n")
	require.True(t, r.redo.Len() > 0)
	require.NoError(t, srv.Unmount())
	assert.False(t, r.redo.Len() > 0, "the unmount checkpoints")
	j, err = os.ReadFile(jpath)
	require.NoError(t, err)
	assert.Empty(t, j, "the journal closes empty: every record ended")
	got, err := os.ReadFile(filepath.Join(backing, "log"))
	require.NoError(t, err)
	assert.Equal(t, "one\ntwo\nthree\n", string(got))
}

// A write in place (a hard-linked file's rewrite) checkpoints first: a
// redo record left open would write its old bytes over the new version
// at recovery.
func TestRedoCheckpointBeforeInPlace(t *testing.T) {
	srv, _, mnt := mountForTest(t)
	p := filepath.Join(mnt, "data")
	appendLine(t, p, "appended\n")
	require.NoError(t, os.Link(p, p+".link")) // a link does not end it
	require.True(t, srv.r.redo.Len() > 0)
	require.NoError(t, os.WriteFile(p, []byte("rewritten\n"), 0o644))
	assert.False(t, srv.r.redo.Len() > 0, "the rewrite in place left a redo record open")
}

// Past redo.MaxEntries pending, the commit that reaches it checkpoints at
// once: the journal does not grow with lines it must keep.
func TestRedoCheckpointWhenMany(t *testing.T) {
	srv, _, mnt := mountForTest(t)
	p := filepath.Join(mnt, "log")
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	require.NoError(t, err)
	defer f.Close()
	most := 0
	for i := 0; i < 2*redo.MaxEntries; i++ {
		_, err := f.WriteString(strings.Repeat("x", 10) + "\n")
		require.NoError(t, err)
		require.NoError(t, f.Sync()) // fsync commits, as close does
		most = max(most, srv.r.redo.Len())
	}
	assert.Less(t, most, redo.MaxEntries, "pending redo records reached the bound")
	assert.Greater(t, most, 1, "appends were not redo records")
}
