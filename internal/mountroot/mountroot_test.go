package mountroot

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A tmpfs mount swapped for its entry "top" shows top's content at the
// mount point, and one unmount ends it; an entry that is not there
// leaves the mount as it was.
func TestSwap(t *testing.T) {
	mp := t.TempDir()
	if !CanSwap(mp) {
		t.Skip("no new mount API here (needs CAP_SYS_ADMIN, Linux 5.2+)")
	}
	require.NoError(t, unix.Mount("tmpfs", mp, "tmpfs", 0, "size=1m"))
	t.Cleanup(func() { _ = unix.Unmount(mp, unix.MNT_DETACH) })
	require.NoError(t, os.Mkdir(filepath.Join(mp, "top"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(mp, "top", "f"), []byte("x"), 0o644))

	err := Swap(mp, "missing")
	assert.ErrorIs(t, err, ErrSwap)
	assert.NotErrorIs(t, err, ErrSwapDetached)
	_, err = os.Stat(filepath.Join(mp, "top", "f"))
	require.NoError(t, err, "a failed swap changed the mount")

	require.NoError(t, Swap(mp, "top"))
	b, err := os.ReadFile(filepath.Join(mp, "f"))
	require.NoError(t, err)
	assert.Equal(t, "x", string(b))
	require.NoError(t, unix.Unmount(mp, 0))
	_, err = os.Stat(filepath.Join(mp, "f"))
	assert.ErrorIs(t, err, os.ErrNotExist, "still mounted after one unmount")
}
