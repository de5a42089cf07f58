package backing

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func openDir(t *testing.T, dir string) int {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// Only a regular file is opened: a FIFO is never opened (no hang), a
// directory or symlink is refused; the stat is the file's opened.
func TestOpenRegular(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), []byte("data"), 0o644))
	require.NoError(t, unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "d"), 0o755))
	require.NoError(t, os.Symlink("f", filepath.Join(dir, "l")))
	fd := openDir(t, dir)

	f, st, err := OpenRegularStat(fd, "f", unix.O_RDONLY)
	require.NoError(t, err)
	defer f.Close()
	fst, err := Fstat(int(f.Fd()))
	require.NoError(t, err)
	assert.Equal(t, fst.Ino, st.Ino)
	assert.EqualValues(t, 4, st.Size)

	for nm, want := range map[string]error{"fifo": syscall.ENXIO, "d": syscall.EISDIR, "l": syscall.ELOOP,
		"missing": syscall.ENOENT, "../f": syscall.EINVAL} {
		_, err := OpenRegular(fd, nm, unix.O_RDONLY)
		assert.ErrorIs(t, err, want, nm)
	}
}

// A reopen is what a plain open gives: the flags asked for, without the
// O_NONBLOCK it was made with.
func TestReopenFdFlags(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), nil, 0o644))
	p, err := OpenAt(openDir(t, dir), "f", unix.O_PATH, 0)
	require.NoError(t, err)
	defer unix.Close(p)
	for _, flags := range []int{unix.O_RDONLY, unix.O_WRONLY | unix.O_APPEND, unix.O_RDWR | unix.O_NONBLOCK} {
		fd, err := ReopenFd(p, flags)
		require.NoError(t, err)
		fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
		require.NoError(t, err)
		unix.Close(fd)
		assert.Equal(t, flags, fl&(unix.O_ACCMODE|unix.O_APPEND|unix.O_NONBLOCK), "flags %#x", flags)
	}
}

// An open that conflicts with another open file's lease fails at once
// with ErrLeased (EAGAIN), where a plain open would wait for the
// lease-break-time.
func TestReopenFdLeased(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644))
	holder, err := os.Open(filepath.Join(dir, "f"))
	require.NoError(t, err)
	defer holder.Close()
	if _, err := unix.FcntlInt(holder.Fd(), unix.F_SETLEASE, unix.F_RDLCK); err != nil {
		t.Skipf("no lease here: %v", err)
	}
	p, err := OpenAt(openDir(t, dir), "f", unix.O_PATH, 0)
	require.NoError(t, err)
	defer unix.Close(p)
	start := time.Now()
	_, err = ReopenFd(p, unix.O_WRONLY)
	assert.ErrorIs(t, err, ErrLeased)
	assert.ErrorIs(t, err, syscall.EAGAIN)
	assert.Less(t, time.Since(start), 5*time.Second, "waited for the lease")
	fd, err := ReopenFd(p, unix.O_RDONLY) // a reader does not conflict with a read lease
	require.NoError(t, err)
	unix.Close(fd)
}

// A waiter tries again until its limit, and not once its context ended.
func TestLeaseWaiter(t *testing.T) {
	w := LeaseWaiter{Limit: 30 * time.Millisecond}
	start, tries := time.Now(), 0
	for w.Again(context.Background()) {
		tries++
	}
	assert.GreaterOrEqual(t, time.Since(start), 30*time.Millisecond)
	assert.Greater(t, tries, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w = LeaseWaiter{}
	assert.False(t, w.Again(ctx))
	assert.Equal(t, LeaseWait, w.Limit, "the default limit")
}

// WriteWhole replaces the content whole and leaves no temporary file.
func TestWriteWhole(t *testing.T) {
	dir := t.TempDir()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	require.NoError(t, WriteWhole(fd, "learned", []byte("one")))
	require.NoError(t, WriteWhole(fd, "learned", []byte("two")))
	b, err := os.ReadFile(filepath.Join(dir, "learned"))
	require.NoError(t, err)
	assert.Equal(t, "two", string(b))
	names, err := ReadDirNames(fd)
	require.NoError(t, err)
	assert.Equal(t, []string{"learned"}, names)
	assert.Error(t, WriteWhole(fd, "../x", nil))
}

func TestReadDirNames(t *testing.T) {
	dir := t.TempDir()
	for _, nm := range []string{"a", "b", "c"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, nm), nil, 0o644))
	}
	names, err := ReadDirNames(openDir(t, dir))
	require.NoError(t, err)
	sort.Strings(names)
	assert.Equal(t, []string{"a", "b", "c"}, names)
	_, err = ReadDirNames(-1)
	assert.True(t, errors.Is(err, unix.EBADF))
}

// FsyncDir syncs a directory held by an O_PATH fd, which fsync refuses.
func TestFsyncDir(t *testing.T) {
	fd := openDir(t, t.TempDir())
	assert.ErrorIs(t, unix.Fsync(fd), unix.EBADF)
	assert.NoError(t, FsyncDir(fd))
}

// A recovery target is a regular file beneath the root, reached without
// symlinks, open for reading and writing.
func TestTargets(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a", "b", "f"), []byte("x"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "top"), []byte("y"), 0o644))
	require.NoError(t, os.Symlink("a", filepath.Join(dir, "link")))
	tg := Targets{Root: openDir(t, dir)}
	for rel, want := range map[string]string{"a/b/f": "x", "top": "y"} {
		f, err := tg.OpenTarget(rel)
		require.NoError(t, err, rel)
		_, err = f.WriteAt([]byte("z"), 1)
		require.NoError(t, err, "%s: not writable", rel)
		b := make([]byte, 2)
		_, err = f.ReadAt(b, 0)
		require.NoError(t, err)
		assert.Equal(t, want+"z", string(b))
		f.Close()
	}
	for _, rel := range []string{"link/b/f", "../x", "a/b", "a/missing"} {
		_, err := tg.OpenTarget(rel)
		assert.Error(t, err, rel)
	}
}
