package fs_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/testfs"
)

// The atomic-create pattern of O_TMPFILE: write a nameless file, then
// link it into place. Until the link nothing is visible; after it the
// file is a normal one, whose next writes commit at close.
func TestTmpfileLinkIntoPlace(t *testing.T) {
	m := testfs.New(t)
	fd, err := unix.Open(m.Dir, unix.O_TMPFILE|unix.O_RDWR, 0o640)
	require.NoError(t, err)
	f := os.NewFile(uintptr(fd), "tmp")
	defer f.Close()
	_, err = f.WriteString("whole\n")
	require.NoError(t, err)
	names, err := os.ReadDir(m.Dir)
	require.NoError(t, err)
	assert.Empty(t, names, "a nameless file shows up before its link")

	proc := fmt.Sprintf("/proc/self/fd/%d", fd)
	require.NoError(t, unix.Linkat(unix.AT_FDCWD, proc, unix.AT_FDCWD, m.Path("f"), unix.AT_SYMLINK_FOLLOW))
	for _, p := range []string{m.Path("f"), m.BackingPath("f")} {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		assert.Equal(t, "whole\n", string(b), p)
	}
	var st unix.Stat_t
	require.NoError(t, unix.Stat(m.BackingPath("f"), &st))
	assert.Equal(t, uint32(0o640), st.Mode&0o7777)
	assert.EqualValues(t, 1, st.Nlink)

	// Linked, it stages like any file: others see the write at close.
	_, err = f.WriteAt([]byte("WHOLE"), 0)
	require.NoError(t, err)
	b, err := os.ReadFile(m.Path("f"))
	require.NoError(t, err)
	assert.Equal(t, "whole\n", string(b), "a pending write is visible before close")
	require.NoError(t, f.Close())
	b, err = os.ReadFile(m.Path("f"))
	require.NoError(t, err)
	assert.Equal(t, "WHOLE\n", string(b))

	// O_EXCL: never to be linked.
	fd, err = unix.Open(m.Dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_EXCL, 0o600)
	require.NoError(t, err)
	defer unix.Close(fd)
	err = unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), unix.AT_FDCWD, m.Path("g"), unix.AT_SYMLINK_FOLLOW)
	assert.ErrorIs(t, err, unix.ENOENT)
}
