package fs

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A name's absence is cached as a name is: stats of a missing name ask
// the daemon once; a file made through the mount is there at once, one
// made directly in BACKING once the cached absence lapses.
func TestNegativeEntryCached(t *testing.T) {
	_, backing, mnt, logs := mountTraced(t)
	lookups := func(nm string) int {
		return logs.FilterMessageSnippet(`LOOKUP n`).FilterMessageSnippet(`"` + nm + `"`).Len()
	}
	for range 5 {
		_, err := os.Stat(filepath.Join(mnt, ".htaccess"))
		require.ErrorIs(t, err, os.ErrNotExist)
	}
	require.Equal(t, 1, lookups(".htaccess"), "lookups of a missing name in five stats")

	p := filepath.Join(mnt, "made")
	_, err := os.Stat(p)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.NoError(t, os.WriteFile(p, []byte("x"), 0o644))
	_, err = os.Stat(p)
	require.NoError(t, err, "made through the mount after its absence was cached")

	outside := filepath.Join(mnt, "outside")
	_, err = os.Stat(outside)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.NoError(t, os.WriteFile(filepath.Join(backing, "outside"), []byte("x"), 0o644))
	require.Eventually(t, func() bool {
		_, err := os.Stat(outside)
		return err == nil
	}, 5*time.Second, 50*time.Millisecond, "made in BACKING, never seen through the mount")
}
