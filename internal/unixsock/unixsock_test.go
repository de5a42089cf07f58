package unixsock

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func openDir(t *testing.T, dir string) *os.File {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	f := os.NewFile(uintptr(fd), dir)
	t.Cleanup(func() { f.Close() })
	return f
}

func lstat(t *testing.T, p string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Lstat(p, &st))
	return st
}

// The socket lands in the directory the descriptor names, although its
// path now leads elsewhere through a symlink, with the mode asked for
// whatever the umask (0 here, as in the daemon once mounted); Close
// removes it there.
func TestListenThroughDescriptor(t *testing.T) {
	base := t.TempDir()
	dir, other := filepath.Join(base, "dir"), filepath.Join(base, "other")
	require.NoError(t, os.Mkdir(dir, 0o755))
	require.NoError(t, os.Mkdir(other, 0o755))
	d := openDir(t, dir)
	require.NoError(t, os.Rename(dir, dir+".moved"))
	require.NoError(t, os.Symlink(other, dir))
	old := unix.Umask(0)
	l, err := Listen(d, "s.sock", 0o600)
	unix.Umask(old)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "s.sock"), l.Path())

	st := lstat(t, filepath.Join(dir+".moved", "s.sock"))
	assert.Equal(t, uint32(unix.S_IFSOCK|0o600), st.Mode)
	ents, err := os.ReadDir(other)
	require.NoError(t, err)
	assert.Empty(t, ents, "made where the path leads")

	c, err := net.Dial("unix", filepath.Join(dir+".moved", "s.sock"))
	require.NoError(t, err)
	a, err := l.Accept()
	require.NoError(t, err)
	a.Close()
	c.Close()

	require.NoError(t, l.Close())
	assert.NoFileExists(t, filepath.Join(dir+".moved", "s.sock"))
	require.NoError(t, l.Close(), "a second Close")
}

// What is at the name first: a socket nothing listens on is replaced,
// a live one is in use, anything else is left alone.
func TestListenWhatIsThere(t *testing.T) {
	dir := t.TempDir()
	d := openDir(t, dir)
	p := filepath.Join(dir, "s.sock")

	stale, err := net.Listen("unix", p)
	require.NoError(t, err)
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	require.NoError(t, stale.Close())
	l, err := Listen(d, "s.sock", 0o600)
	require.NoError(t, err, "a stale socket")

	_, err = Listen(d, "s.sock", 0o600)
	assert.ErrorIs(t, err, unix.EADDRINUSE, "a live socket")
	require.NoError(t, l.Close())

	target := filepath.Join(dir, "target")
	require.NoError(t, os.WriteFile(target, []byte("keep"), 0o644))
	for what, plant := range map[string]func() error{
		"file":    func() error { return os.WriteFile(p, []byte("keep"), 0o644) },
		"symlink": func() error { return os.Symlink(target, p) },
		"dir":     func() error { return os.Mkdir(p, 0o755) },
	} {
		require.NoError(t, plant(), what)
		_, err := Listen(d, "s.sock", 0o600)
		assert.ErrorIs(t, err, ErrNotSocket, what)
		_, err = os.Lstat(p)
		assert.NoError(t, err, "%s: removed", what)
		require.NoError(t, os.Remove(p))
	}
	b, err := os.ReadFile(target)
	require.NoError(t, err)
	assert.Equal(t, "keep", string(b))
	assert.Equal(t, uint32(unix.S_IFREG|0o644), lstat(t, target).Mode)

	for _, bad := range []string{"", ".", "..", "a/b"} {
		_, err := Listen(d, bad, 0o600)
		assert.ErrorIs(t, err, unix.EINVAL, "%q", bad)
	}
}

// Close leaves alone what replaced its socket.
func TestCloseLeavesAReplacement(t *testing.T) {
	dir := t.TempDir()
	d := openDir(t, dir)
	l, err := Listen(d, "s.sock", 0o600)
	require.NoError(t, err)
	p := filepath.Join(dir, "s.sock")
	require.NoError(t, os.Rename(p, p+".old"))
	require.NoError(t, os.WriteFile(p, []byte("another's"), 0o644))
	require.NoError(t, l.Close())
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, "another's", string(b))
	var pe *os.PathError
	assert.False(t, errors.As(l.Close(), &pe))
}
