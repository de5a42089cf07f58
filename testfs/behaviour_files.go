package testfs

// Behaviour cases: a file's content: create, truncate, append, seek,
// allocate, holes and fsync.

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func caseCreateWriteReadClose(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	f := bhOpen(t, p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	n, err := f.Write([]byte("hello world"))
	require.NoError(t, err)
	require.Equal(t, 11, n)
	bhClose(t, f)
	require.Equal(t, "hello world", bhRead(t, p))
	st := bhStat(t, p)
	require.Equal(t, int64(11), st.Size)
	require.Equal(t, uint32(unix.S_IFREG), bhType(st))
	require.Equal(t, uint32(0o644), bhMode(st))
	require.Equal(t, uint64(1), uint64(st.Nlink))
}

func caseOpenTrunc(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "hello world")
	f := bhOpen(t, p, os.O_RDWR|os.O_TRUNC, 0)
	require.Equal(t, int64(0), bhFstat(t, f).Size)
	require.Equal(t, "", bhReadAll(t, f))
	_, err := f.Write([]byte("x"))
	require.NoError(t, err)
	bhClose(t, f)
	require.Equal(t, "x", bhRead(t, p))
	require.Equal(t, int64(1), bhStat(t, p).Size)
}

func caseAppendSequentialFds(t *testing.T, dir string) {
	p := filepath.Join(dir, "log")
	bhWrite(t, p, "start\n")
	for _, line := range []string{"one\n", "two\n", "three\n"} {
		f := bhOpen(t, p, os.O_WRONLY|os.O_APPEND, 0)
		_, err := f.Write([]byte(line))
		require.NoError(t, err)
		bhClose(t, f)
	}
	require.Equal(t, "start\none\ntwo\nthree\n", bhRead(t, p))
	// O_APPEND|O_CREAT on a missing file.
	q := filepath.Join(dir, "new")
	f := bhOpen(t, q, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	_, err := f.Write([]byte("a"))
	require.NoError(t, err)
	_, err = f.Write([]byte("b"))
	require.NoError(t, err)
	bhClose(t, f)
	require.Equal(t, "ab", bhRead(t, q))
}

// Two fds open together both append: no byte is lost or overwritten,
// each write stays whole, and one fd's writes keep their order. (POSIX
// also fixes the interleaving; safefs places an fd's appends at its
// close, which SafefsCases check.)
func caseAppendTwoOpenFds(t *testing.T, dir string) {
	p, a, b := bhTwoAppenders(t, dir, "a1", "b1", "a2", "b2")
	bhClose(t, a)
	bhClose(t, b)
	got := bhRead(t, p)
	require.Len(t, got, len("start\na1\nb1\na2\nb2\n"))
	require.True(t, strings.HasPrefix(got, "start\n"), "got %q", got)
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	require.ElementsMatch(t, []string{"start", "a1", "b1", "a2", "b2"}, lines)
	require.Less(t, strings.Index(got, "a1"), strings.Index(got, "a2"))
	require.Less(t, strings.Index(got, "b1"), strings.Index(got, "b2"))
}

// bhTwoAppenders writes "start" to dir/log, opens it twice for appending
// (a and b) and writes the lines to a, b, a, b... in turn, each with a
// newline.
func bhTwoAppenders(t *testing.T, dir string, lines ...string) (p string, a, b *os.File) {
	p = filepath.Join(dir, "log")
	bhWrite(t, p, "start\n")
	a = bhOpen(t, p, os.O_WRONLY|os.O_APPEND, 0)
	b = bhOpen(t, p, os.O_WRONLY|os.O_APPEND, 0)
	for i, line := range lines {
		w := a
		if i%2 == 1 {
			w = b
		}
		_, err := w.Write([]byte(line + "\n"))
		require.NoError(t, err)
	}
	return p, a, b
}

func caseCreateExclExisting(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "keep")
	_, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_TRUNC, 0o644)
	require.ErrorIs(t, err, unix.EEXIST)
	require.Equal(t, "keep", bhRead(t, p))
	// A dangling symlink counts as existing, and is not followed.
	l := filepath.Join(dir, "l")
	require.NoError(t, os.Symlink("missing", l))
	_, err = unix.Open(l, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
	require.ErrorIs(t, err, unix.EEXIST)
	bhNoEntry(t, filepath.Join(dir, "missing"))
	// A directory too.
	require.NoError(t, os.Mkdir(filepath.Join(dir, "d"), 0o755))
	_, err = unix.Open(filepath.Join(dir, "d"), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
	require.ErrorIs(t, err, unix.EEXIST)
}

func caseTruncatePath(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "hello world")
	require.NoError(t, unix.Truncate(p, 5))
	require.Equal(t, int64(5), bhStat(t, p).Size)
	require.Equal(t, "hello", bhRead(t, p))
	require.NoError(t, unix.Truncate(p, 8))
	require.Equal(t, int64(8), bhStat(t, p).Size)
	require.Equal(t, "hello\x00\x00\x00", bhRead(t, p))
	require.NoError(t, unix.Truncate(p, 0))
	require.Equal(t, "", bhRead(t, p))
	require.ErrorIs(t, unix.Truncate(filepath.Join(dir, "missing"), 1), unix.ENOENT)
	require.NoError(t, os.Mkdir(filepath.Join(dir, "d"), 0o755))
	require.ErrorIs(t, unix.Truncate(filepath.Join(dir, "d"), 1), unix.EISDIR)
}

func caseFtruncate(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "hello world")
	f := bhOpen(t, p, os.O_RDWR, 0)
	require.NoError(t, unix.Ftruncate(int(f.Fd()), 3))
	require.Equal(t, int64(3), bhFstat(t, f).Size)
	require.Equal(t, "hel", bhReadAll(t, f))
	require.NoError(t, unix.Ftruncate(int(f.Fd()), 6))
	require.Equal(t, "hel\x00\x00\x00", bhReadAll(t, f))
	bhClose(t, f)
	require.Equal(t, "hel\x00\x00\x00", bhRead(t, p))
	// ftruncate on a read-only fd fails.
	r := bhOpen(t, p, os.O_RDONLY, 0)
	require.Error(t, unix.Ftruncate(int(r.Fd()), 0))
	bhClose(t, r)
	require.Equal(t, int64(6), bhStat(t, p).Size)
}

func caseFallocate(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "abc")
	f := bhOpen(t, p, os.O_RDWR, 0)
	require.NoError(t, unix.Fallocate(int(f.Fd()), 0, 0, 8192))
	require.Equal(t, int64(8192), bhFstat(t, f).Size)
	// Inside the size: no change.
	require.NoError(t, unix.Fallocate(int(f.Fd()), 0, 0, 100))
	require.Equal(t, int64(8192), bhFstat(t, f).Size)
	bhClose(t, f)
	require.Equal(t, int64(8192), bhStat(t, p).Size)
	got := bhRead(t, p)
	require.Equal(t, "abc", got[:3])
	require.Equal(t, strings.Repeat("\x00", 8192-3), got[3:])
}

func caseLseek(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "0123456789")
	f := bhOpen(t, p, os.O_RDWR, 0)
	fd := int(f.Fd())
	off, err := unix.Seek(fd, 0, unix.SEEK_END)
	require.NoError(t, err)
	require.Equal(t, int64(10), off)
	off, err = unix.Seek(fd, -3, unix.SEEK_END)
	require.NoError(t, err)
	require.Equal(t, int64(7), off)
	buf := make([]byte, 10)
	n, err := unix.Read(fd, buf)
	require.NoError(t, err)
	require.Equal(t, "789", string(buf[:n]))
	off, err = unix.Seek(fd, 0, unix.SEEK_DATA)
	require.NoError(t, err)
	require.Equal(t, int64(0), off)
	off, err = unix.Seek(fd, 0, unix.SEEK_HOLE)
	require.NoError(t, err)
	require.Equal(t, int64(10), off)
	_, err = unix.Seek(fd, 10, unix.SEEK_DATA)
	require.ErrorIs(t, err, unix.ENXIO)
	// The fd's own writes move SEEK_END.
	_, err = unix.Pwrite(fd, []byte("abcde"), 10)
	require.NoError(t, err)
	off, err = unix.Seek(fd, 0, unix.SEEK_END)
	require.NoError(t, err)
	require.Equal(t, int64(15), off)
	_, err = unix.Seek(fd, 20, unix.SEEK_DATA)
	require.ErrorIs(t, err, unix.ENXIO)
	off, err = unix.Seek(fd, 12, unix.SEEK_DATA)
	require.NoError(t, err)
	require.Equal(t, int64(12), off)
	_, err = unix.Seek(fd, -1, unix.SEEK_SET)
	require.ErrorIs(t, err, unix.EINVAL)
}

func caseFsync(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "old")
	f := bhOpen(t, p, os.O_RDWR|os.O_TRUNC, 0)
	_, err := f.Write([]byte("synced"))
	require.NoError(t, err)
	require.NoError(t, unix.Fsync(int(f.Fd())))
	// After fsync, a new reader sees the bytes.
	require.Equal(t, "synced", bhRead(t, p))
	_, err = f.Write([]byte(" more"))
	require.NoError(t, err)
	require.NoError(t, unix.Fdatasync(int(f.Fd())))
	require.Equal(t, "synced more", bhReadAll(t, f))
	bhClose(t, f)
	require.Equal(t, "synced more", bhRead(t, p))
	// fsync of a clean fd.
	r := bhOpen(t, p, os.O_RDONLY, 0)
	require.NoError(t, unix.Fsync(int(r.Fd())))
}

// fsync of a directory, as durable writers do after a rename.
func caseFsyncDir(t *testing.T, dir string) {
	bhWrite(t, filepath.Join(dir, "tmp"), "x")
	require.NoError(t, unix.Rename(filepath.Join(dir, "tmp"), filepath.Join(dir, "f")))
	for _, d := range []string{dir, filepath.Join(dir, "sub")} {
		if d != dir {
			require.NoError(t, os.Mkdir(d, 0o755))
		}
		f := bhOpen(t, d, os.O_RDONLY, 0)
		require.NoError(t, unix.Fsync(int(f.Fd())), "fsync %s", d)
		require.NoError(t, unix.Fdatasync(int(f.Fd())), "fdatasync %s", d)
	}
}

func caseStatSizeAfterClose(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	f := bhOpen(t, p, os.O_WRONLY|os.O_CREATE, 0o644)
	data := bytes.Repeat([]byte("0123456789"), 12345)
	for i := 0; i < len(data); i += 7000 {
		_, err := f.Write(data[i:min(i+7000, len(data))])
		require.NoError(t, err)
	}
	require.Equal(t, int64(len(data)), bhFstat(t, f).Size)
	bhClose(t, f)
	require.Equal(t, int64(len(data)), bhStat(t, p).Size)
	r := bhOpen(t, p, os.O_RDONLY, 0)
	require.Equal(t, int64(len(data)), bhFstat(t, r).Size)
	fi, err := os.Stat(p)
	require.NoError(t, err)
	require.Equal(t, int64(len(data)), fi.Size())
	require.Equal(t, string(data), bhRead(t, p))
}

func caseHole(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	const off = 1 << 30
	f := bhOpen(t, p, os.O_RDWR|os.O_CREATE, 0o644)
	_, err := f.WriteAt([]byte("end"), off)
	require.NoError(t, err)
	require.Equal(t, int64(off+3), bhFstat(t, f).Size)
	bhClose(t, f)
	st := bhStat(t, p)
	require.Equal(t, int64(off+3), st.Size)
	require.Less(t, st.Blocks*512, int64(1<<20), "the hole takes no space")
	r := bhOpen(t, p, os.O_RDONLY, 0)
	for _, at := range []int64{0, 4096, off / 2, off - 4096} {
		buf := make([]byte, 4096)
		n, err := r.ReadAt(buf, at)
		require.NoError(t, err)
		require.Equal(t, 4096, n)
		require.Equal(t, make([]byte, 4096), buf, "hole at %d", at)
	}
	buf := make([]byte, 10)
	n, err := r.ReadAt(buf, off-2)
	require.ErrorIs(t, err, io.EOF)
	require.Equal(t, "\x00\x00end", string(buf[:n]))
	// SEEK_DATA skips the hole.
	d, err := unix.Seek(int(r.Fd()), 0, unix.SEEK_DATA)
	require.NoError(t, err)
	require.Greater(t, d, int64(off/2))
	bhClose(t, r)
	// A rewrite of the first byte keeps the file sparse.
	w := bhOpen(t, p, os.O_RDWR, 0)
	_, err = w.WriteAt([]byte("S"), 0)
	require.NoError(t, err)
	bhClose(t, w)
	st = bhStat(t, p)
	require.Equal(t, int64(off+3), st.Size)
	require.Less(t, st.Blocks*512, int64(1<<20), "still sparse after a rewrite")
	r = bhOpen(t, p, os.O_RDONLY, 0)
	n, err = r.ReadAt(buf[:2], 0)
	require.NoError(t, err)
	require.Equal(t, "S\x00", string(buf[:n]))
}
