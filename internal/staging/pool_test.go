package staging

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"
)

// A file from the pool is named in the staging directory, empty, 0600,
// its own; files never taken leave no name, before or after close.
func TestStagingPool(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("linkat of an O_TMPFILE fd needs CAP_DAC_READ_SEARCH: as non-root the pool is off")
	}
	for _, size := range []int{4, 0} {
		dir := t.TempDir()
		fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		require.NoError(t, err)
		defer unix.Close(fd)
		p := NewPool(fd, size, zaptest.NewLogger(t))
		seen := map[string]bool{}
		for i := range 10 {
			f, nm, err := p.Take()
			require.NoError(t, err)
			assert.False(t, seen[nm], "name %s given twice", nm)
			seen[nm] = true
			_, err = f.WriteString("x")
			require.NoError(t, err)
			f.Close()
			fi, err := os.Stat(filepath.Join(dir, nm))
			require.NoError(t, err, "pool %d, take %d: the file has no name", size, i)
			assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
			assert.EqualValues(t, 1, fi.Size(), "a second take gave the same file")
		}
		ents, err := os.ReadDir(dir)
		require.NoError(t, err)
		assert.Len(t, ents, 10, "pool %d: only taken files have names", size)
		p.Close()
		ents, err = os.ReadDir(dir)
		require.NoError(t, err)
		assert.Len(t, ents, 10, "pool %d: close left names", size)
		assert.False(t, p.off && size > 0, "the pool turned itself off here")
	}
}
