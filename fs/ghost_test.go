package fs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A symlink renamed over through the mount still reads through a
// descriptor of it, as on a plain file system: a path walk that resolved
// it just before the rename reads it just after (go-fuse's posixtest
// OpenSymlinkRace got ESTALE from open when that happened twice in a row).
func TestSymlinkGhostReads(t *testing.T) {
	_, _, mnt := mountForTest(t)
	l := filepath.Join(mnt, "l")
	require.NoError(t, os.Symlink("target", l))
	fd, err := unix.Open(l, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	x := filepath.Join(mnt, "x")
	require.NoError(t, os.WriteFile(x, []byte("data"), 0o644))
	require.NoError(t, os.Rename(x, l))
	buf := make([]byte, 64)
	n, err := unix.Readlinkat(fd, "", buf)
	require.NoError(t, err, "readlink of the symlink renamed over")
	assert.Equal(t, "target", string(buf[:max(n, 0)]))
}
