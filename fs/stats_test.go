package fs_test

import (
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/testfs"
)

// The counters count commits, rejected commits and killed writers.
func TestStatsCount(t *testing.T) {
	m := testfs.New(t)
	for range 3 {
		require.NoError(t, os.WriteFile(m.Path("f"), []byte("x"), 0o644))
	}
	// A commit refused: the file was replaced directly in BACKING while
	// open for writing.
	w, err := os.OpenFile(m.Path("f"), os.O_WRONLY|os.O_TRUNC, 0)
	require.NoError(t, err)
	_, err = w.WriteString("lost?")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(m.BackingPath("g"), []byte("outside"), 0o644))
	require.NoError(t, os.Rename(m.BackingPath("g"), m.BackingPath("f")))
	require.ErrorIs(t, w.Close(), syscall.ESTALE)

	// The kill-check self-test at mount is not counted.
	assert.Equal(t, fs.Stats{Commits: 3, Rejected: 1}, m.Stats())
}
