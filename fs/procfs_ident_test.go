package fs

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// fdIdentity gives a descriptor's inode number and mount ID as stat and
// statx give them; holdsOpen finds a descriptor this process holds, and
// not one of another inode.
func TestFdIdentity(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(p, []byte("x"), 0o644))
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	var sx unix.Statx_t
	require.NoError(t, unix.Statx(int(f.Fd()), "", unix.AT_EMPTY_PATH, unix.STATX_INO|unix.STATX_MNT_ID, &sx))

	mnt, ino, ok := fdIdentity(fmt.Sprintf("/proc/self/fdinfo/%d", f.Fd()))
	require.True(t, ok)
	assert.Equal(t, sx.Ino, ino)
	assert.Equal(t, int(sx.Mnt_id), mnt)

	self := uint32(os.Getpid())
	assert.True(t, holdsOpen(self, sx.Ino, int(sx.Mnt_id)))
	assert.False(t, holdsOpen(self, sx.Ino+1<<40, int(sx.Mnt_id)), "another inode")
	assert.False(t, holdsOpen(self, sx.Ino, 0), "mount unknown")
}
