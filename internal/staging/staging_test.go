package staging

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func tempDir(t *testing.T) (string, int) {
	t.Helper()
	dir := t.TempDir()
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	return dir, fd
}

// A temp file is private (0600), new, and named 32 hex digits.
func TestNewTemp(t *testing.T) {
	dir, fd := tempDir(t)
	f, nm, err := NewTemp(fd)
	require.NoError(t, err)
	defer f.Close()
	assert.Len(t, nm, 32)
	assert.NotEqual(t, nm, TempName())
	fi, err := os.Stat(filepath.Join(dir, nm))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode())
}

// A copy is whole, and a hole stays a hole (no blocks copied for it).
func TestCopyDataSparse(t *testing.T) {
	_, fd := tempDir(t)
	src, _, err := NewTemp(fd)
	require.NoError(t, err)
	defer src.Close()
	dst, _, err := NewTemp(fd)
	require.NoError(t, err)
	defer dst.Close()
	const size = 256 << 20
	_, err = src.WriteAt([]byte("head"), 0)
	require.NoError(t, err)
	_, err = src.WriteAt([]byte("tail"), size-4)
	require.NoError(t, err)
	_, err = dst.WriteString("old content, longer than nothing")
	require.NoError(t, err)
	require.NoError(t, CopyData(dst, src))
	var st unix.Stat_t
	require.NoError(t, unix.Fstat(int(dst.Fd()), &st))
	assert.EqualValues(t, size, st.Size)
	assert.Less(t, st.Blocks*512, int64(1<<20), "the hole was copied as data")
	buf := make([]byte, 8)
	_, err = dst.ReadAt(buf, 0)
	require.NoError(t, err)
	assert.Equal(t, "head\x00\x00\x00\x00", string(buf))
	_, err = dst.ReadAt(buf[:4], size-4)
	require.NoError(t, err)
	assert.Equal(t, "tail", string(buf[:4]))
}

// AppendTo puts all of src after dst's end; CopyRange copies a range.
func TestAppendToAndCopyRange(t *testing.T) {
	_, fd := tempDir(t)
	a, _, err := NewTemp(fd)
	require.NoError(t, err)
	defer a.Close()
	b, _, err := NewTemp(fd)
	require.NoError(t, err)
	defer b.Close()
	_, _ = a.WriteString("one\n")
	_, _ = b.WriteString("two\nthree\n")
	require.NoError(t, AppendTo(a, b))
	require.NoError(t, CopyRange(a, 1, b, 4, 5))
	got := make([]byte, 64)
	n, _ := a.ReadAt(got, 0)
	assert.Equal(t, "othreeo\nthree\n", string(got[:n]))
	assert.Error(t, CopyRange(a, 0, b, 100, 1), "past the end")
}
