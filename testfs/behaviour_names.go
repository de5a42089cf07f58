package testfs

// Behaviour cases: names: directories, unlink, rename in its forms,
// links, readdir and odd names.

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func caseMkdirRmdir(t *testing.T, dir string) {
	d := filepath.Join(dir, "d")
	require.NoError(t, unix.Mkdir(d, 0o755))
	st := bhStat(t, d)
	require.Equal(t, uint32(unix.S_IFDIR), bhType(st))
	require.Equal(t, uint32(0o755), bhMode(st))
	require.ErrorIs(t, unix.Mkdir(d, 0o755), unix.EEXIST)
	bhWrite(t, filepath.Join(d, "f"), "x")
	require.ErrorIs(t, unix.Rmdir(d), unix.ENOTEMPTY)
	require.ErrorIs(t, unix.Rmdir(filepath.Join(d, "f")), unix.ENOTDIR)
	require.ErrorIs(t, unix.Unlink(d), unix.EISDIR)
	require.ErrorIs(t, unix.Mkdir(filepath.Join(dir, "no", "sub"), 0o755), unix.ENOENT)
	require.NoError(t, unix.Unlink(filepath.Join(d, "f")))
	require.NoError(t, unix.Rmdir(d))
	bhNoEntry(t, d)
	require.ErrorIs(t, unix.Rmdir(d), unix.ENOENT)
}

func caseUnlink(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "x")
	require.NoError(t, unix.Unlink(p))
	bhNoEntry(t, p)
	require.ErrorIs(t, unix.Unlink(p), unix.ENOENT)
	require.Empty(t, bhNames(t, dir))
}

func caseRenamePlain(t *testing.T, dir string) {
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	bhWrite(t, a, "content")
	ino := bhStat(t, a).Ino
	require.NoError(t, unix.Rename(a, b))
	bhNoEntry(t, a)
	require.Equal(t, "content", bhRead(t, b))
	require.Equal(t, ino, bhStat(t, b).Ino)
	require.Equal(t, []string{"b"}, bhNames(t, dir))
	require.ErrorIs(t, unix.Rename(a, b), unix.ENOENT)
}

func caseRenameOverExisting(t *testing.T, dir string) {
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	bhWrite(t, a, "new")
	bhWrite(t, b, "old version")
	ino := bhStat(t, a).Ino
	require.NoError(t, unix.Rename(a, b))
	bhNoEntry(t, a)
	require.Equal(t, "new", bhRead(t, b))
	require.Equal(t, ino, bhStat(t, b).Ino)
	require.Equal(t, []string{"b"}, bhNames(t, dir))
	// A file over a directory, and a directory over a non-empty one.
	d := filepath.Join(dir, "d")
	require.NoError(t, os.Mkdir(d, 0o755))
	require.ErrorIs(t, unix.Rename(b, d), unix.EISDIR)
	e := filepath.Join(dir, "e")
	require.NoError(t, os.Mkdir(e, 0o755))
	bhWrite(t, filepath.Join(e, "x"), "x")
	require.ErrorIs(t, unix.Rename(d, e), unix.ENOTEMPTY)
}

func caseRenameNoReplace(t *testing.T, dir string) {
	a, b, c := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "c")
	bhWrite(t, a, "A")
	bhWrite(t, b, "B")
	err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_NOREPLACE)
	require.ErrorIs(t, err, unix.EEXIST)
	require.Equal(t, "A", bhRead(t, a))
	require.Equal(t, "B", bhRead(t, b))
	require.NoError(t, unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, c, unix.RENAME_NOREPLACE))
	bhNoEntry(t, a)
	require.Equal(t, "A", bhRead(t, c))
}

func caseRenameExchange(t *testing.T, dir string) {
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	bhWrite(t, a, "first")
	bhWrite(t, b, "second file")
	ia, ib := bhStat(t, a).Ino, bhStat(t, b).Ino
	require.NoError(t, unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE))
	require.Equal(t, "second file", bhRead(t, a))
	require.Equal(t, "first", bhRead(t, b))
	require.Equal(t, ib, bhStat(t, a).Ino)
	require.Equal(t, ia, bhStat(t, b).Ino)
	// Writes after the exchange land on the file now at each name.
	bhWrite(t, a, "A2")
	require.Equal(t, "A2", bhRead(t, a))
	require.Equal(t, "first", bhRead(t, b))
	// A file with a directory.
	d := filepath.Join(dir, "d")
	require.NoError(t, os.Mkdir(d, 0o755))
	bhWrite(t, filepath.Join(d, "in"), "inside")
	require.NoError(t, unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, d, unix.RENAME_EXCHANGE))
	require.Equal(t, "A2", bhRead(t, d))
	require.Equal(t, "inside", bhRead(t, filepath.Join(a, "in")))
	// Exchange needs both names.
	err := unix.Renameat2(unix.AT_FDCWD, b, unix.AT_FDCWD, filepath.Join(dir, "none"), unix.RENAME_EXCHANGE)
	require.ErrorIs(t, err, unix.ENOENT)
}

func caseRenameDirWithFiles(t *testing.T, dir string) {
	d := filepath.Join(dir, "d")
	require.NoError(t, os.MkdirAll(filepath.Join(d, "sub"), 0o755))
	bhWrite(t, filepath.Join(d, "x"), "xx")
	bhWrite(t, filepath.Join(d, "sub", "y"), "yy")
	e := filepath.Join(dir, "e")
	require.NoError(t, unix.Rename(d, e))
	bhNoEntry(t, d)
	require.Equal(t, "xx", bhRead(t, filepath.Join(e, "x")))
	require.Equal(t, "yy", bhRead(t, filepath.Join(e, "sub", "y")))
	require.Equal(t, []string{"sub", "x"}, bhNames(t, e))
	// Rewrite a file under the new name, then move the subdirectory out.
	bhWrite(t, filepath.Join(e, "sub", "y"), "y2")
	require.NoError(t, unix.Rename(filepath.Join(e, "sub"), filepath.Join(dir, "sub")))
	require.Equal(t, "y2", bhRead(t, filepath.Join(dir, "sub", "y")))
	// A directory cannot move under itself.
	require.ErrorIs(t, unix.Rename(e, filepath.Join(e, "inside")), unix.EINVAL)
}

// A file renamed while open for writing gets the bytes at its new name.
func caseRenameWhileWriterOpen(t *testing.T, dir string) {
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	bhWrite(t, a, "old")
	f := bhOpen(t, a, os.O_WRONLY|os.O_TRUNC, 0)
	_, err := f.Write([]byte("new content"))
	require.NoError(t, err)
	require.NoError(t, unix.Rename(a, b))
	bhClose(t, f)
	bhNoEntry(t, a)
	require.Equal(t, "new content", bhRead(t, b))
	require.Equal(t, []string{"b"}, bhNames(t, dir))
}

func caseRenameParentWhileWriterOpen(t *testing.T, dir string) {
	d, e := filepath.Join(dir, "d"), filepath.Join(dir, "e")
	require.NoError(t, os.Mkdir(d, 0o755))
	bhWrite(t, filepath.Join(d, "f"), "old")
	f := bhOpen(t, filepath.Join(d, "f"), os.O_RDWR, 0)
	_, err := f.WriteAt([]byte("NEW"), 0)
	require.NoError(t, err)
	require.NoError(t, unix.Rename(d, e))
	bhClose(t, f)
	bhNoEntry(t, d)
	require.Equal(t, "NEW", bhRead(t, filepath.Join(e, "f")))
}

// A writer whose file was replaced by a rename writes to the replaced
// file, not to the one now at its name.
func caseRenameOverOpenWriter(t *testing.T, dir string) {
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	bhWrite(t, a, "replacement")
	bhWrite(t, b, "original")
	f := bhOpen(t, b, os.O_RDWR, 0)
	require.NoError(t, unix.Rename(a, b))
	_, err := f.WriteAt([]byte("ORIG"), 0)
	require.NoError(t, err)
	require.Equal(t, "ORIGinal", bhReadAll(t, f))
	require.Equal(t, uint64(0), uint64(bhFstat(t, f).Nlink))
	bhClose(t, f)
	require.Equal(t, "replacement", bhRead(t, b))
	require.Equal(t, []string{"b"}, bhNames(t, dir))
}

func caseHardLink(t *testing.T, dir string) {
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	bhWrite(t, a, "one")
	require.NoError(t, unix.Link(a, b))
	sa, sb := bhStat(t, a), bhStat(t, b)
	require.Equal(t, uint64(2), uint64(sa.Nlink))
	require.Equal(t, uint64(2), uint64(sb.Nlink))
	require.Equal(t, sa.Ino, sb.Ino)
	require.ErrorIs(t, unix.Link(a, b), unix.EEXIST)
	// Write through one name, read through the other.
	bhWrite(t, a, "two, longer")
	require.Equal(t, "two, longer", bhRead(t, b))
	f := bhOpen(t, b, os.O_WRONLY|os.O_APPEND, 0)
	_, err := f.Write([]byte("+b"))
	require.NoError(t, err)
	bhClose(t, f)
	require.Equal(t, "two, longer+b", bhRead(t, a))
	sa, sb = bhStat(t, a), bhStat(t, b)
	require.Equal(t, sa.Ino, sb.Ino)
	require.Equal(t, uint64(2), uint64(sa.Nlink))
	// Unlink one: the other has nlink 1 and the content.
	require.NoError(t, unix.Unlink(a))
	sb = bhStat(t, b)
	require.Equal(t, uint64(1), uint64(sb.Nlink))
	require.Equal(t, "two, longer+b", bhRead(t, b))
	// Directories cannot be hard-linked.
	require.NoError(t, os.Mkdir(filepath.Join(dir, "d"), 0o755))
	require.ErrorIs(t, unix.Link(filepath.Join(dir, "d"), filepath.Join(dir, "d2")), unix.EPERM)
}

func caseSymlink(t *testing.T, dir string) {
	target, l := filepath.Join(dir, "target"), filepath.Join(dir, "l")
	bhWrite(t, target, "pointed at")
	require.NoError(t, unix.Symlink("target", l))
	got, err := os.Readlink(l)
	require.NoError(t, err)
	require.Equal(t, "target", got)
	st := bhLstat(t, l)
	require.Equal(t, uint32(unix.S_IFLNK), bhType(st))
	require.Equal(t, int64(len("target")), st.Size)
	require.Equal(t, uint32(unix.S_IFREG), bhType(bhStat(t, l)))
	require.Equal(t, "pointed at", bhRead(t, l))
	// Writing through the link writes the target; the link stays a link.
	bhWrite(t, l, "via link")
	require.Equal(t, "via link", bhRead(t, target))
	require.Equal(t, uint32(unix.S_IFLNK), bhType(bhLstat(t, l)))
	// Dangling: lstat works, stat does not; readlink of a file is EINVAL.
	d := filepath.Join(dir, "dangling")
	require.NoError(t, unix.Symlink("/nonexistent/x", d))
	bhLstat(t, d)
	var sst unix.Stat_t
	require.ErrorIs(t, unix.Stat(d, &sst), unix.ENOENT)
	_, err = unix.Readlink(target, make([]byte, 64))
	require.ErrorIs(t, err, unix.EINVAL)
	_, err = unix.Open(l, unix.O_RDONLY|unix.O_NOFOLLOW, 0)
	require.ErrorIs(t, err, unix.ELOOP)
	require.ErrorIs(t, unix.Symlink("x", l), unix.EEXIST)
}

func caseReaddirExact(t *testing.T, dir string) {
	require.Empty(t, bhNames(t, dir))
	bhWrite(t, filepath.Join(dir, "a"), "x")
	bhWrite(t, filepath.Join(dir, "b"), "x")
	require.NoError(t, os.Mkdir(filepath.Join(dir, "c"), 0o755))
	require.NoError(t, os.Symlink("a", filepath.Join(dir, "d")))
	bhWrite(t, filepath.Join(dir, "c", "inner"), "x")
	require.Equal(t, []string{"a", "b", "c", "d"}, bhNames(t, dir))
	require.Equal(t, []string{"inner"}, bhNames(t, filepath.Join(dir, "c")))
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	types := map[string]os.FileMode{}
	for _, e := range ents {
		types[e.Name()] = e.Type()
	}
	require.Equal(t, map[string]os.FileMode{"a": 0, "b": 0, "c": os.ModeDir, "d": os.ModeSymlink}, types)
	inos := bhDirInos(t, dir)
	for nm, ino := range inos {
		require.Equal(t, bhLstat(t, filepath.Join(dir, nm)).Ino, ino, "d_ino of %s", nm)
	}
	// Many entries: more than one getdents buffer.
	sub := filepath.Join(dir, "many")
	require.NoError(t, os.Mkdir(sub, 0o755))
	var want []string
	for i := 0; i < 300; i++ {
		nm := fmt.Sprintf("file-%04d-%s", i, strings.Repeat("x", 40))
		want = append(want, nm)
		bhWrite(t, filepath.Join(sub, nm), "")
	}
	require.Equal(t, want, bhNames(t, sub))
	require.NoError(t, unix.Unlink(filepath.Join(sub, want[7])))
	require.Equal(t, append(append([]string{}, want[:7]...), want[8:]...), bhNames(t, sub))
}

func caseNameMax(t *testing.T, dir string) {
	n255 := strings.Repeat("n", 255)
	n256 := strings.Repeat("n", 256)
	p := filepath.Join(dir, n255)
	bhWrite(t, p, "long")
	require.Equal(t, "long", bhRead(t, p))
	require.Equal(t, []string{n255}, bhNames(t, dir))
	bhWrite(t, p, "rewritten") // a commit of a 255-byte name
	require.Equal(t, "rewritten", bhRead(t, p))
	d := filepath.Join(dir, "d"+n255[1:])
	require.NoError(t, unix.Mkdir(d, 0o755))
	require.NoError(t, unix.Rename(p, filepath.Join(d, n255)))
	require.Equal(t, "rewritten", bhRead(t, filepath.Join(d, n255)))

	long := filepath.Join(dir, n256)
	_, err := unix.Open(long, unix.O_CREAT|unix.O_WRONLY, 0o644)
	require.ErrorIs(t, err, unix.ENAMETOOLONG)
	var st unix.Stat_t
	require.ErrorIs(t, unix.Stat(long, &st), unix.ENAMETOOLONG)
	require.ErrorIs(t, unix.Mkdir(long, 0o755), unix.ENAMETOOLONG)
	require.ErrorIs(t, unix.Symlink("x", long), unix.ENAMETOOLONG)
	require.ErrorIs(t, unix.Rename(filepath.Join(d, n255), long), unix.ENAMETOOLONG)
	require.ErrorIs(t, unix.Link(filepath.Join(d, n255), long), unix.ENAMETOOLONG)
}

func caseOddNames(t *testing.T, dir string) {
	names := []string{"new\nline", "-dash", "--", "\xff\xfe bad utf-8", " space ", "tab\there", "é-ünï", "*?[", "back\\slash", ".hidden", "..."}
	for i, nm := range names {
		p := filepath.Join(dir, nm)
		bhWrite(t, p, fmt.Sprint(i))
		require.Equal(t, fmt.Sprint(i), bhRead(t, p), "%q", nm)
		bhWrite(t, p, fmt.Sprint(i, "b"))
		require.Equal(t, fmt.Sprint(i, "b"), bhRead(t, p), "%q", nm)
	}
	want := append([]string{}, names...)
	sort.Strings(want)
	require.Equal(t, want, bhNames(t, dir))
	for _, nm := range names {
		p := filepath.Join(dir, nm)
		require.NoError(t, unix.Rename(p, p+"\x01r"), "%q", nm)
		require.NoError(t, unix.Symlink(nm, p), "%q", nm)
		got, err := os.Readlink(p)
		require.NoError(t, err)
		require.Equal(t, nm, got)
		require.NoError(t, unix.Unlink(p+"\x01r"), "%q", nm)
		require.NoError(t, unix.Unlink(p), "%q", nm)
	}
	require.Empty(t, bhNames(t, dir))
}

func caseMkfifo(t *testing.T, dir string) {
	p := filepath.Join(dir, "fifo")
	require.NoError(t, unix.Mkfifo(p, 0o644))
	st := bhLstat(t, p)
	require.Equal(t, uint32(unix.S_IFIFO), bhType(st))
	require.Equal(t, uint32(0o644), bhMode(st))
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, ents, 1)
	require.Equal(t, os.ModeNamedPipe, ents[0].Type())
	// It works as a pipe.
	r, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(r)
	w, err := unix.Open(p, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(w)
	_, err = unix.Write(w, []byte("through"))
	require.NoError(t, err)
	buf := make([]byte, 16)
	n, err := unix.Read(r, buf)
	require.NoError(t, err)
	require.Equal(t, "through", string(buf[:n]))
	require.ErrorIs(t, unix.Mkfifo(p, 0o644), unix.EEXIST)
}
