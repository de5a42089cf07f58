package owndir

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func dirFd(t *testing.T, dir string) int {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func untrusted(t *testing.T, err error, what string) {
	t.Helper()
	var u Untrusted
	require.True(t, errors.As(err, &u), "%s: %v, want Untrusted", what, err)
	assert.ErrorIs(t, err, ErrUntrusted)
}

// A missing directory is made 0700; one readable by others is closed to
// them; a symlink, a file, one owned by another user or writable by
// others is not the daemon's own.
func TestOpen(t *testing.T) {
	top := t.TempDir()
	d := dirFd(t, top)
	fd, err := Open(d, "new", unix.O_PATH)
	require.NoError(t, err)
	unix.Close(fd)
	fi, err := os.Stat(filepath.Join(top, "new"))
	require.NoError(t, err)
	assert.Equal(t, os.ModeDir|0o700, fi.Mode())

	require.NoError(t, os.Mkdir(filepath.Join(top, "open"), 0o755))
	require.NoError(t, os.Chmod(filepath.Join(top, "open"), 0o755))
	fd, err = Open(d, "open", unix.O_RDONLY)
	require.NoError(t, err)
	unix.Close(fd)
	fi, err = os.Stat(filepath.Join(top, "open"))
	require.NoError(t, err)
	assert.Equal(t, os.ModeDir|0o700, fi.Mode(), "read and search bits taken away")

	require.NoError(t, os.Symlink("new", filepath.Join(top, "link")))
	_, err = Open(d, "link", unix.O_PATH)
	untrusted(t, err, "symlink")
	require.NoError(t, os.WriteFile(filepath.Join(top, "file"), nil, 0o600))
	_, err = Open(d, "file", unix.O_PATH)
	untrusted(t, err, "file")
	require.NoError(t, os.Mkdir(filepath.Join(top, "shared"), 0o700))
	require.NoError(t, os.Chmod(filepath.Join(top, "shared"), 0o770))
	_, err = Open(d, "shared", unix.O_PATH)
	untrusted(t, err, "group-writable")
	if os.Geteuid() == 0 {
		require.NoError(t, os.Mkdir(filepath.Join(top, "foreign"), 0o700))
		require.NoError(t, os.Chown(filepath.Join(top, "foreign"), 33, 33))
		_, err = Open(d, "foreign", unix.O_PATH)
		untrusted(t, err, "another user's")
	}
	_, err = Open(d, "../x", unix.O_PATH)
	assert.ErrorIs(t, err, unix.EINVAL)
}

// A file may be missing; if there, it is a regular file with one link,
// the daemon's own.
func TestCheckFile(t *testing.T) {
	top := t.TempDir()
	d := dirFd(t, top)
	assert.NoError(t, CheckFile(d, "missing"))
	require.NoError(t, os.WriteFile(filepath.Join(top, "journal"), nil, 0o600))
	assert.NoError(t, CheckFile(d, "journal"))
	require.NoError(t, os.Link(filepath.Join(top, "journal"), filepath.Join(top, "other")))
	untrusted(t, CheckFile(d, "journal"), "two links")
	require.NoError(t, os.Mkdir(filepath.Join(top, "dir"), 0o700))
	untrusted(t, CheckFile(d, "dir"), "a directory")
	require.NoError(t, os.WriteFile(filepath.Join(top, "open"), nil, 0o600))
	require.NoError(t, os.Chmod(filepath.Join(top, "open"), 0o666))
	untrusted(t, CheckFile(d, "open"), "writable by others")
}
