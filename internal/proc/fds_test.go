package proc

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
// statx give them; HoldsOpen finds a descriptor this process holds, and
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
	assert.True(t, HoldsOpen(self, sx.Ino, int(sx.Mnt_id)))
	assert.False(t, HoldsOpen(self, sx.Ino+1<<40, int(sx.Mnt_id)), "another inode")
	assert.False(t, HoldsOpen(self, sx.Ino, 0), "mount unknown")
}

// CloseOnExec marks the descriptors open on a file, and no other.
func TestCloseOnExec(t *testing.T) {
	dir := t.TempDir()
	open := func(nm string) int {
		p := filepath.Join(dir, nm)
		require.NoError(t, os.WriteFile(p, nil, 0o644))
		fd, err := unix.Open(p, unix.O_RDONLY, 0) // without O_CLOEXEC
		require.NoError(t, err)
		t.Cleanup(func() { unix.Close(fd) })
		return fd
	}
	cloexec := func(fd int) bool {
		fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		require.NoError(t, err)
		return fl&unix.FD_CLOEXEC != 0
	}
	a, b := open("a"), open("b")
	CloseOnExec(filepath.Join(dir, "a"))
	assert.True(t, cloexec(a))
	assert.False(t, cloexec(b))
}
