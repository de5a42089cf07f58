package testfs

// The behaviour suite: what legacy programs expect of a POSIX file
// system, as small named cases that each get a fresh directory. Every
// case in BehaviourCases passes on a plain local directory and must pass
// through safefs too; running it on both proves the suite. SafefsCases
// check what safefs does on purpose differently (snapshot reads, appends
// placed at close, the hidden internal directory): mount only.
//
// With the in-process daemon of testfs.New, a case must not start a
// process while the test itself holds a file open with unsaved writes:
// that hangs (see ForkExecWithOpenWriter). Run such work in a child.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/internal/mountinfo"
	"github.com/safefs/safefs/journal"
)

// Case is one behaviour check, run in an empty directory.
type Case struct {
	Name string
	Run  func(t *testing.T, dir string)
}

// RunCases runs each case as a subtest in a directory made by newDir.
func RunCases(t *testing.T, cases []Case, newDir func(t *testing.T) string) {
	t.Helper()
	seen := map[string]bool{}
	for _, c := range cases {
		if seen[c.Name] {
			t.Fatalf("two cases named %q", c.Name)
		}
		seen[c.Name] = true
		t.Run(c.Name, func(t *testing.T) { c.Run(t, newDir(t)) })
	}
}

// PlainDir is an empty local directory that other users can reach.
func PlainDir(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{root, filepath.Dir(root)} {
		require.NoError(t, os.Chmod(d, 0o755))
	}
	return root
}

// MountDir is the top of a fresh safefs mount. Before the unmount it
// checks that no staging or undo file was left behind.
func MountDir(t *testing.T) string {
	t.Helper()
	m := New(t)
	t.Cleanup(func() { NoPendingStaging(t, m) })
	return m.Dir
}

// NoPendingStaging fails when staging/ or undo/ still hold files once
// every handle is released (releases reach the daemon asynchronously
// after close, so it waits a little).
func NoPendingStaging(t testing.TB, m *Mount) {
	t.Helper()
	var left []string
	for deadline := time.Now().Add(3 * time.Second); ; {
		left = left[:0]
		for _, d := range []string{journal.StagingDir, journal.UndoDir} {
			ents, err := os.ReadDir(m.BackingPath(fs.InternalDir, d))
			if err != nil {
				t.Errorf("read %s: %v", d, err)
				return
			}
			for _, e := range ents {
				left = append(left, d+"/"+e.Name())
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Errorf("left in %s after every file was closed: %v", fs.InternalDir, left)
	}
}

// --- helpers ---

func bhWrite(t *testing.T, path, data string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(data), 0o644))
}

func bhRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// bhOpen opens path; the test's cleanup closes it if the case did not.
func bhOpen(t *testing.T, path string, flag int, perm os.FileMode) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, flag, perm)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

func bhClose(t *testing.T, f *os.File) {
	t.Helper()
	require.NoError(t, f.Close())
}

// bhReadAll reads f from offset 0 to EOF without moving its offset.
func bhReadAll(t *testing.T, f *os.File) string {
	t.Helper()
	b, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<40))
	require.NoError(t, err)
	return string(b)
}

func bhLstat(t *testing.T, path string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Lstat(path, &st))
	return st
}

func bhStat(t *testing.T, path string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Stat(path, &st))
	return st
}

func bhFstat(t *testing.T, f *os.File) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Fstat(int(f.Fd()), &st))
	return st
}

func bhNoEntry(t *testing.T, path string) {
	t.Helper()
	var st unix.Stat_t
	require.ErrorIs(t, unix.Lstat(path, &st), unix.ENOENT, "%s should not exist", path)
}

// bhNames lists dir (without . and ..), sorted.
func bhNames(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open(dir)
	require.NoError(t, err)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	require.NoError(t, err)
	sort.Strings(names)
	return names
}

// bhDirInos maps the names of dir to the inode numbers readdir gives.
func bhDirInos(t *testing.T, dir string) map[string]uint64 {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	out := map[string]uint64{}
	buf := make([]byte, 8192)
	for {
		n, err := unix.ReadDirent(fd, buf)
		require.NoError(t, err)
		if n == 0 {
			return out
		}
		for b := buf[:n]; len(b) > 0; {
			// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
			reclen := int(b[16]) | int(b[17])<<8
			ino := uint64(0)
			for i := 7; i >= 0; i-- {
				ino = ino<<8 | uint64(b[i])
			}
			nm := b[19:reclen]
			nm = nm[:bytes.IndexByte(nm, 0)]
			if s := string(nm); s != "." && s != ".." {
				out[s] = ino
			}
			b = b[reclen:]
		}
	}
}

// bhPerlAs runs a Perl one-liner as c and returns its exit status.
func bhPerlAs(t *testing.T, c Cred, prog string, args ...string) int {
	t.Helper()
	cmd := AsUser(exec.Command("perl", append([]string{"-e", prog}, args...)...), c)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	require.NoError(t, err, "perl: %s", out)
	return 0
}

func bhNano(ts unix.Timespec) int64 { return ts.Nano() }

func bhMode(st unix.Stat_t) uint32 { return st.Mode & 07777 }

func bhType(st unix.Stat_t) uint32 { return st.Mode & unix.S_IFMT }

// --- the POSIX cases ---

// BehaviourCases pass on any local POSIX file system (run as root).
var BehaviourCases = []Case{
	{"CreateWriteReadClose", caseCreateWriteReadClose},
	{"OpenTrunc", caseOpenTrunc},
	{"AppendSequentialFds", caseAppendSequentialFds},
	{"AppendTwoOpenFds", caseAppendTwoOpenFds},
	{"CreateExclExisting", caseCreateExclExisting},
	{"MkdirRmdir", caseMkdirRmdir},
	{"Unlink", caseUnlink},
	{"RenamePlain", caseRenamePlain},
	{"RenameOverExisting", caseRenameOverExisting},
	{"RenameNoReplace", caseRenameNoReplace},
	{"RenameExchange", caseRenameExchange},
	{"RenameDirWithFiles", caseRenameDirWithFiles},
	{"RenameWhileWriterOpen", caseRenameWhileWriterOpen},
	{"RenameParentWhileWriterOpen", caseRenameParentWhileWriterOpen},
	{"RenameOverOpenWriter", caseRenameOverOpenWriter},
	{"HardLink", caseHardLink},
	{"SymlinkReadlinkLstat", caseSymlink},
	{"Chmod", caseChmod},
	{"Chown", caseChown},
	{"MetadataSurvivesRewrite", caseMetadataSurvivesRewrite},
	{"InodeStableAcrossRewrite", caseInodeStableAcrossRewrite},
	{"ChtimesExact", caseChtimes},
	{"FutimensBeforeClose", caseFutimensBeforeClose},
	{"CpPreserve", caseCpPreserve},
	{"TruncatePath", caseTruncatePath},
	{"Ftruncate", caseFtruncate},
	{"Fallocate", caseFallocate},
	{"LseekEndData", caseLseek},
	{"Fsync", caseFsync},
	{"FsyncDir", caseFsyncDir},
	{"Xattrs", caseXattrs},
	{"Statfs", caseStatfs},
	{"ReaddirExact", caseReaddirExact},
	{"Access", caseAccess},
	{"AccessOtherUser", caseAccessOtherUser},
	{"ModeZero", caseModeZero},
	{"CreateAsOtherUser", caseCreateAsOtherUser},
	{"FlockExclusion", caseFlock},
	{"FcntlLockTwoProcesses", caseFcntlLockTwoProcesses},
	{"ReadYourWrites", caseReadYourWrites},
	{"ReadBeforeWriteSeesCurrent", caseReadBeforeWrite},
	{"ReaderOpenedBeforeWriterClose", caseReaderOpenedBeforeWriterClose},
	{"ReadWhileWriting", caseReadWhileWriting},
	{"StatSizeAfterClose", caseStatSizeAfterClose},
	{"HoleAtLargeOffset", caseHole},
	{"NameMax", caseNameMax},
	{"OddNames", caseOddNames},
	{"Mkfifo", caseMkfifo},
	{"UnlinkOpenFile", caseUnlinkOpenFile},
	{"UnlinkOpenFileFsync", caseUnlinkOpenFileFsync},
	{"UnlinkOpenReader", caseUnlinkOpenReader},
	{"UnlinkRecreateWhileWriterOpen", caseUnlinkRecreateWhileWriterOpen},
	{"OpenDuringAtomicReplace", caseOpenDuringAtomicReplace},
	{"ForkExecWithOpenWriter", caseForkExecWithOpenWriter},
	{"StatMatchesReadWhileWriterOpen", caseStatMatchesRead},
}

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
	p := filepath.Join(dir, "log")
	bhWrite(t, p, "start\n")
	a := bhOpen(t, p, os.O_WRONLY|os.O_APPEND, 0)
	b := bhOpen(t, p, os.O_WRONLY|os.O_APPEND, 0)
	for _, w := range []struct {
		f    *os.File
		line string
	}{{a, "a1\n"}, {b, "b1\n"}, {a, "a2\n"}, {b, "b2\n"}} {
		_, err := w.f.Write([]byte(w.line))
		require.NoError(t, err)
	}
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

func caseChmod(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "x")
	for _, m := range []uint32{0o600, 0o751, 0o4755, 0o644} { // 000: see ModeZero
		require.NoError(t, unix.Chmod(p, m))
		require.Equal(t, m, bhMode(bhStat(t, p)), "mode %o", m)
	}
	d := filepath.Join(dir, "d")
	require.NoError(t, os.Mkdir(d, 0o755))
	require.NoError(t, unix.Chmod(d, 0o1777))
	require.Equal(t, uint32(0o1777), bhMode(bhStat(t, d)))
	// fchmod on an open fd.
	f := bhOpen(t, p, os.O_RDONLY, 0)
	require.NoError(t, unix.Fchmod(int(f.Fd()), 0o640))
	require.Equal(t, uint32(0o640), bhMode(bhStat(t, p)))
}

func caseChown(t *testing.T, dir string) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "x")
	st := bhStat(t, p)
	require.Equal(t, uint32(0), st.Uid)
	require.NoError(t, unix.Chown(p, 33, 33))
	st = bhStat(t, p)
	require.Equal(t, uint32(33), st.Uid)
	require.Equal(t, uint32(33), st.Gid)
	require.NoError(t, unix.Chown(p, -1, 0))
	st = bhStat(t, p)
	require.Equal(t, uint32(33), st.Uid)
	require.Equal(t, uint32(0), st.Gid)
	// lchown changes the link, not the target.
	l := filepath.Join(dir, "l")
	require.NoError(t, unix.Symlink("f", l))
	require.NoError(t, unix.Lchown(l, 33, 33))
	require.Equal(t, uint32(33), bhLstat(t, l).Uid)
	require.Equal(t, uint32(0), bhStat(t, p).Gid)
	// fchown on an open fd.
	f := bhOpen(t, p, os.O_RDONLY, 0)
	require.NoError(t, unix.Fchown(int(f.Fd()), 0, 33))
	st = bhStat(t, p)
	require.Equal(t, uint32(0), st.Uid)
	require.Equal(t, uint32(33), st.Gid)
}

// A rewrite keeps owner, group, mode and extended attributes.
func caseMetadataSurvivesRewrite(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "v1")
	require.NoError(t, unix.Chmod(p, 0o640))
	require.NoError(t, unix.Setxattr(p, "user.tag", []byte("kept"), 0))
	if os.Geteuid() == 0 {
		require.NoError(t, unix.Chown(p, 33, 33))
	}
	for _, flag := range []int{os.O_WRONLY | os.O_TRUNC, os.O_RDWR, os.O_WRONLY | os.O_APPEND} {
		f := bhOpen(t, p, flag, 0)
		_, err := f.Write([]byte("v2"))
		require.NoError(t, err)
		bhClose(t, f)
		st := bhStat(t, p)
		require.Equal(t, uint32(0o640), bhMode(st), "flags %#x", flag)
		if os.Geteuid() == 0 {
			require.Equal(t, uint32(33), st.Uid, "flags %#x", flag)
			require.Equal(t, uint32(33), st.Gid, "flags %#x", flag)
		}
		buf := make([]byte, 16)
		n, err := unix.Getxattr(p, "user.tag", buf)
		require.NoError(t, err, "flags %#x", flag)
		require.Equal(t, "kept", string(buf[:n]))
	}
	require.Equal(t, "v2v2", bhRead(t, p))
}

// A file keeps its inode number when rewritten, in stat and in readdir.
func caseInodeStableAcrossRewrite(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "v1")
	ino := bhStat(t, p).Ino
	require.Equal(t, ino, bhDirInos(t, dir)["f"])
	for i := 0; i < 3; i++ {
		bhWrite(t, p, fmt.Sprintf("version %d", i))
		f := bhOpen(t, p, os.O_RDONLY, 0)
		require.Equal(t, ino, bhFstat(t, f).Ino)
		bhClose(t, f)
		require.Equal(t, ino, bhStat(t, p).Ino)
		require.Equal(t, ino, bhDirInos(t, dir)["f"], "readdir d_ino after rewrite %d", i)
	}
}

func caseChtimes(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "x")
	atime := time.Date(2001, 2, 3, 4, 5, 6, 123456789, time.UTC)
	mtime := time.Date(2002, 3, 4, 5, 6, 7, 987654321, time.UTC)
	require.NoError(t, os.Chtimes(p, atime, mtime))
	st := bhStat(t, p)
	require.Equal(t, mtime.UnixNano(), bhNano(st.Mtim))
	require.Equal(t, atime.UnixNano(), bhNano(st.Atim))
	// A reader does not change mtime.
	require.Equal(t, "x", bhRead(t, p))
	require.Equal(t, mtime.UnixNano(), bhNano(bhStat(t, p).Mtim))
	// An open for writing that writes nothing does not either.
	f := bhOpen(t, p, os.O_RDWR, 0)
	bhClose(t, f)
	require.Equal(t, mtime.UnixNano(), bhNano(bhStat(t, p).Mtim))
	// A write does.
	before := time.Now().Add(-2 * time.Second)
	bhWrite(t, p, "y")
	require.True(t, time.Unix(0, bhNano(bhStat(t, p).Mtim)).After(before))
	// Symlink times, without following.
	ts := []unix.Timespec{unix.NsecToTimespec(atime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
	l := filepath.Join(dir, "l")
	require.NoError(t, unix.Symlink("f", l))
	require.NoError(t, unix.UtimesNanoAt(unix.AT_FDCWD, l, ts, unix.AT_SYMLINK_NOFOLLOW))
	require.Equal(t, mtime.UnixNano(), bhNano(bhLstat(t, l).Mtim))
}

// Times set on a writer's fd after its writes and before close (what
// cp -p, tar and install do) are the file's times after the close.
func caseFutimensBeforeClose(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "x")
	mtime := time.Date(2002, 3, 4, 5, 6, 7, 987654321, time.UTC)
	f := bhOpen(t, p, os.O_RDWR, 0)
	_, err := f.WriteAt([]byte("z"), 0)
	require.NoError(t, err)
	// futimens(fd): x/sys has no NULL-path utimensat; the kernel resolves
	// /proc/self/fd/N to the same inode, which is what futimens acts on.
	ts := []unix.Timespec{unix.NsecToTimespec(mtime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
	require.NoError(t, unix.UtimesNanoAt(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", f.Fd()), ts, 0))
	require.Equal(t, mtime.UnixNano(), bhNano(bhFstat(t, f).Mtim), "fstat before close")
	bhClose(t, f)
	require.Equal(t, "z", bhRead(t, p))
	require.Equal(t, mtime.UnixNano(), bhNano(bhStat(t, p).Mtim), "stat after close")
}

// cp -p keeps the source's mtime on the copy.
func caseCpPreserve(t *testing.T, dir string) {
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	bhWrite(t, src, "copied")
	mtime := time.Date(2003, 4, 5, 6, 7, 8, 0, time.UTC)
	require.NoError(t, os.Chtimes(src, mtime, mtime))
	require.NoError(t, unix.Chmod(src, 0o640))
	out, err := exec.Command("cp", "-p", src, dst).CombinedOutput()
	require.NoError(t, err, "cp: %s", out)
	require.Equal(t, "copied", bhRead(t, dst))
	st := bhStat(t, dst)
	require.Equal(t, uint32(0o640), bhMode(st))
	require.Equal(t, mtime.UnixNano(), bhNano(st.Mtim), "mtime of the copy")
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

func caseXattrs(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "x")
	buf := make([]byte, 256)
	_, err := unix.Getxattr(p, "user.a", buf)
	require.ErrorIs(t, err, unix.ENODATA)
	require.NoError(t, unix.Setxattr(p, "user.a", []byte("alpha"), 0))
	require.NoError(t, unix.Setxattr(p, "user.b", []byte(""), 0))
	require.ErrorIs(t, unix.Setxattr(p, "user.a", []byte("x"), unix.XATTR_CREATE), unix.EEXIST)
	require.ErrorIs(t, unix.Setxattr(p, "user.c", []byte("x"), unix.XATTR_REPLACE), unix.ENODATA)
	n, err := unix.Getxattr(p, "user.a", buf)
	require.NoError(t, err)
	require.Equal(t, "alpha", string(buf[:n]))
	sz, err := unix.Getxattr(p, "user.a", nil)
	require.NoError(t, err)
	require.Equal(t, 5, sz)
	_, err = unix.Getxattr(p, "user.a", make([]byte, 2))
	require.ErrorIs(t, err, unix.ERANGE)
	n, err = unix.Listxattr(p, buf)
	require.NoError(t, err)
	var names []string
	for _, b := range bytes.Split(buf[:n], []byte{0}) {
		if len(b) > 0 && bytes.HasPrefix(b, []byte("user.")) {
			names = append(names, string(b))
		}
	}
	sort.Strings(names)
	require.Equal(t, []string{"user.a", "user.b"}, names)
	require.NoError(t, unix.Removexattr(p, "user.a"))
	_, err = unix.Getxattr(p, "user.a", buf)
	require.ErrorIs(t, err, unix.ENODATA)
	require.ErrorIs(t, unix.Removexattr(p, "user.a"), unix.ENODATA)
	// On a directory, and through an fd.
	require.NoError(t, unix.Setxattr(dir, "user.d", []byte("dir"), 0))
	n, err = unix.Getxattr(dir, "user.d", buf)
	require.NoError(t, err)
	require.Equal(t, "dir", string(buf[:n]))
	f := bhOpen(t, p, os.O_RDONLY, 0)
	require.NoError(t, unix.Fsetxattr(int(f.Fd()), "user.f", []byte("fd"), 0))
	n, err = unix.Getxattr(p, "user.f", buf)
	require.NoError(t, err)
	require.Equal(t, "fd", string(buf[:n]))
}

func caseStatfs(t *testing.T, dir string) {
	var s unix.Statfs_t
	require.NoError(t, unix.Statfs(dir, &s))
	require.Positive(t, s.Bsize)
	require.Positive(t, s.Blocks)
	require.LessOrEqual(t, s.Bavail, s.Blocks)
	require.Equal(t, int64(255), s.Namelen)
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "x")
	f := bhOpen(t, p, os.O_RDONLY, 0)
	var s2 unix.Statfs_t
	require.NoError(t, unix.Fstatfs(int(f.Fd()), &s2))
	require.Equal(t, s.Blocks, s2.Blocks)
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

func caseAccess(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "x")
	require.NoError(t, unix.Access(p, unix.F_OK))
	require.NoError(t, unix.Access(p, unix.R_OK|unix.W_OK))
	require.ErrorIs(t, unix.Access(filepath.Join(dir, "missing"), unix.F_OK), unix.ENOENT)
	if os.Geteuid() == 0 {
		// Root needs some x bit to execute.
		require.ErrorIs(t, unix.Access(p, unix.X_OK), unix.EACCES)
		require.NoError(t, unix.Chmod(p, 0o700))
		require.NoError(t, unix.Access(p, unix.X_OK))
		require.NoError(t, unix.Chmod(p, 0o000))
		require.NoError(t, unix.Access(p, unix.R_OK|unix.W_OK))
	}
}

// perlOpen exits 0 when open succeeds, 13 on EACCES, 1 otherwise.
const perlOpen = `open(my $f, $ARGV[1], $ARGV[0]) and exit 0; exit($!{EACCES} ? 13 : 1)`

func caseAccessOtherUser(t *testing.T, dir string) {
	www := LookupUser(t, "www-data")
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "x")
	require.NoError(t, unix.Chmod(p, 0o644))
	require.Equal(t, 0, bhPerlAs(t, www, perlOpen, p, "<"))
	require.Equal(t, 13, bhPerlAs(t, www, perlOpen, p, ">>"))
	require.NoError(t, unix.Chmod(p, 0o600))
	require.Equal(t, 13, bhPerlAs(t, www, perlOpen, p, "<"))
	require.NoError(t, unix.Chown(p, int(www.Uid), int(www.Gid)))
	require.Equal(t, 0, bhPerlAs(t, www, perlOpen, p, ">>"))
	// Creating in a directory it cannot write.
	require.NoError(t, unix.Chmod(dir, 0o755))
	require.Equal(t, 13, bhPerlAs(t, www, perlOpen, filepath.Join(dir, "new"), ">"))
	bhNoEntry(t, filepath.Join(dir, "new"))
}

// Permission bits 000 deny every other user, and stat shows them.
func caseModeZero(t *testing.T, dir string) {
	www := LookupUser(t, "www-data")
	p := filepath.Join(dir, "secret")
	bhWrite(t, p, "secret")
	require.NoError(t, unix.Chmod(p, 0))
	d := filepath.Join(dir, "closed")
	require.NoError(t, os.Mkdir(d, 0o755))
	bhWrite(t, filepath.Join(d, "in"), "x")
	require.NoError(t, unix.Chmod(d, 0))
	assert.Equal(t, 13, bhPerlAs(t, www, perlOpen, p, "<"), "www-data could open a mode-000 file")
	assert.Equal(t, 13, bhPerlAs(t, www, perlOpen, filepath.Join(d, "in"), "<"), "www-data could go through a mode-000 directory")
	assert.Equal(t, uint32(0), bhMode(bhStat(t, p)), "stat mode of the file")
	assert.Equal(t, uint32(0), bhMode(bhStat(t, d)), "stat mode of the directory")
}

// A file another user creates is theirs, with the mode asked for.
func caseCreateAsOtherUser(t *testing.T, dir string) {
	www := LookupUser(t, "www-data")
	d := filepath.Join(dir, "pub")
	require.NoError(t, os.Mkdir(d, 0o755))
	require.NoError(t, unix.Chmod(d, 0o777))
	p := filepath.Join(d, "f")
	require.Equal(t, 0, bhPerlAs(t, www, `sysopen(my $f, $ARGV[0], 0101, 0640) or exit 1; print $f "hi" or exit 2; close($f) or exit 3`, p))
	st := bhStat(t, p)
	require.Equal(t, www.Uid, st.Uid)
	require.Equal(t, www.Gid, st.Gid)
	require.Equal(t, uint32(0o640), bhMode(st))
	require.Equal(t, "hi", bhRead(t, p))
	// And a rewrite by that user keeps it theirs.
	require.Equal(t, 0, bhPerlAs(t, www, perlOpen, p, ">"))
	st = bhStat(t, p)
	require.Equal(t, www.Uid, st.Uid)
	require.Equal(t, "", bhRead(t, p))
}

func caseFlock(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "x")
	a := bhOpen(t, p, os.O_RDWR, 0)
	b := bhOpen(t, p, os.O_RDONLY, 0)
	require.NoError(t, unix.Flock(int(a.Fd()), unix.LOCK_EX|unix.LOCK_NB))
	require.ErrorIs(t, unix.Flock(int(b.Fd()), unix.LOCK_EX|unix.LOCK_NB), unix.EWOULDBLOCK)
	require.ErrorIs(t, unix.Flock(int(b.Fd()), unix.LOCK_SH|unix.LOCK_NB), unix.EWOULDBLOCK)
	// Still held after a's writes are committed by fsync.
	_, err := a.WriteAt([]byte("y"), 0)
	require.NoError(t, err)
	require.NoError(t, a.Sync())
	require.ErrorIs(t, unix.Flock(int(b.Fd()), unix.LOCK_EX|unix.LOCK_NB), unix.EWOULDBLOCK)
	// A third fd, opened after the commit, is excluded too.
	c := bhOpen(t, p, os.O_RDONLY, 0)
	require.ErrorIs(t, unix.Flock(int(c.Fd()), unix.LOCK_EX|unix.LOCK_NB), unix.EWOULDBLOCK)
	require.NoError(t, unix.Flock(int(a.Fd()), unix.LOCK_UN))
	require.NoError(t, unix.Flock(int(b.Fd()), unix.LOCK_SH|unix.LOCK_NB))
	require.NoError(t, unix.Flock(int(c.Fd()), unix.LOCK_SH|unix.LOCK_NB))
	require.ErrorIs(t, unix.Flock(int(a.Fd()), unix.LOCK_EX|unix.LOCK_NB), unix.EWOULDBLOCK)
	// Closing releases: at once on a local file system; through the
	// daemon's locks (the default) when the kernel's RELEASE, sent after
	// close() returned, reaches it (docs/design.md, locks).
	bhClose(t, b)
	bhClose(t, c)
	var err2 error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if err2 = unix.Flock(int(a.Fd()), unix.LOCK_EX|unix.LOCK_NB); err2 != unix.EWOULDBLOCK {
			break
		}
	}
	require.NoError(t, err2, "the closed files' locks were not released")
}

// bhHold runs a Perl program in another process, which holds something
// (a lock, an open writer) until its stdin closes at the test's end. It
// returns the first line the program prints when ready, its pid, and a
// function that ends it early.
func bhHold(t *testing.T, prog string, args ...string) (string, int, func()) {
	t.Helper()
	cmd := exec.Command("perl", append([]string{"-e", prog}, args...)...)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	var once sync.Once
	stop := func() {
		once.Do(func() {
			stdin.Close()
			require.NoError(t, cmd.Wait(), "perl: %s", stderr.String())
		})
	}
	t.Cleanup(stop)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		stdin.Close()
		werr := cmd.Wait()
		t.Fatalf("perl said nothing: %v %v: %s", err, werr, stderr.String())
	}
	return line, cmd.Process.Pid, stop
}

// perlLock holds a whole-file write lock (struct flock on x86_64/arm64:
// short type, short whence, pad, off_t start, off_t len, pid_t pid, pad)
// until its stdin closes.
const perlLock = `use Fcntl;
open(my $fh, "+<", $ARGV[0]) or die "open: $!";
my $lk = pack("s s x4 q q i x4", F_WRLCK, 0, 0, 0, 0);
fcntl($fh, F_SETLK, $lk) or die "fcntl: $!";
$| = 1; print "locked\n";
<STDIN>;`

func caseFcntlLockTwoProcesses(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "x")
	line, pid, stop := bhHold(t, perlLock, p)
	require.Equal(t, "locked\n", line)

	f := bhOpen(t, p, os.O_RDWR, 0)
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0}
	err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk)
	require.Error(t, err)
	require.True(t, errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES), "got %v", err)
	lk = unix.Flock_t{Type: unix.F_RDLCK}
	require.NoError(t, unix.FcntlFlock(f.Fd(), unix.F_GETLK, &lk))
	require.Equal(t, int16(unix.F_WRLCK), lk.Type)
	require.Equal(t, int32(pid), lk.Pid)
	stop()
	lk = unix.Flock_t{Type: unix.F_WRLCK}
	require.NoError(t, unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk))
}

func caseReadYourWrites(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	f := bhOpen(t, p, os.O_RDWR|os.O_CREATE, 0o644)
	_, err := f.Write([]byte("hello"))
	require.NoError(t, err)
	require.Equal(t, "hello", bhReadAll(t, f))
	_, err = f.WriteAt([]byte(" world"), 5)
	require.NoError(t, err)
	require.Equal(t, "hello world", bhReadAll(t, f))
	require.Equal(t, int64(11), bhFstat(t, f).Size)
	_, err = f.WriteAt([]byte("J"), 0)
	require.NoError(t, err)
	buf := make([]byte, 5)
	_, err = f.ReadAt(buf, 0)
	require.NoError(t, err)
	require.Equal(t, "Jello", string(buf))
	// read(2) continues from the write offset.
	_, err = f.Seek(6, io.SeekStart)
	require.NoError(t, err)
	n, err := f.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "world", string(buf[:n]))
	bhClose(t, f)
	require.Equal(t, "Jello world", bhRead(t, p))
}

func caseReadBeforeWrite(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "current")
	f := bhOpen(t, p, os.O_RDWR, 0)
	require.Equal(t, "current", bhReadAll(t, f))
	_, err := f.WriteAt([]byte("C"), 0)
	require.NoError(t, err)
	require.Equal(t, "Current", bhReadAll(t, f))
	bhClose(t, f)
	require.Equal(t, "Current", bhRead(t, p))
	// A writer opened before another writer's close, and reading only
	// after it, reads that close's content.
	w1 := bhOpen(t, p, os.O_RDWR, 0)
	w2 := bhOpen(t, p, os.O_RDWR, 0)
	_, err = w1.WriteAt([]byte("K"), 0)
	require.NoError(t, err)
	bhClose(t, w1)
	require.Equal(t, "Kurrent", bhReadAll(t, w2))
	_, err = w2.WriteAt([]byte("T"), 6)
	require.NoError(t, err)
	bhClose(t, w2)
	require.Equal(t, "KurrenT", bhRead(t, p))
}

// A reader opened before a writer's close reads, after the close, one
// whole version: the old (safefs) or the new (a plain directory).
func caseReaderOpenedBeforeWriterClose(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	old, new := strings.Repeat("o", 10000), strings.Repeat("N", 12000)
	bhWrite(t, p, old)
	w := bhOpen(t, p, os.O_WRONLY|os.O_TRUNC, 0)
	r1 := bhOpen(t, p, os.O_RDONLY, 0) // opened after the truncating open
	_, err := w.Write([]byte(new))
	require.NoError(t, err)
	r2 := bhOpen(t, p, os.O_RDONLY, 0) // opened after the write
	bhClose(t, w)
	for _, r := range []*os.File{r1, r2} {
		got := bhReadAll(t, r)
		require.True(t, got == "" || got == old || got == new, "read %d bytes: %.20q", len(got), got)
	}
	require.Equal(t, new, bhRead(t, p))
}

// Readers racing a writer never see bytes that were never written, nor
// a size that never was.
func caseReadWhileWriting(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	const size, chunk = 256 << 10, 4096
	bhWrite(t, p, strings.Repeat("A", size))
	w := bhOpen(t, p, os.O_WRONLY, 0)
	done := make(chan struct{})
	errs := make(chan error, 1)
	go func() {
		defer close(errs)
		for {
			select {
			case <-done:
				return
			default:
			}
			b, err := os.ReadFile(p)
			if err != nil {
				errs <- err
				return
			}
			if len(b) != size || len(bytes.Trim(b, "AB")) != 0 {
				errs <- fmt.Errorf("read %d bytes, with %d not A or B", len(b), len(bytes.Trim(b, "AB")))
				return
			}
		}
	}()
	for off := 0; off < size; off += chunk {
		_, err := w.WriteAt(bytes.Repeat([]byte("B"), chunk), int64(off))
		require.NoError(t, err)
	}
	bhClose(t, w)
	close(done)
	require.NoError(t, <-errs)
	require.Equal(t, strings.Repeat("B", size), bhRead(t, p))
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

func caseUnlinkOpenFile(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "data")
	f := bhOpen(t, p, os.O_RDWR, 0)
	require.NoError(t, unix.Unlink(p))
	bhNoEntry(t, p)
	require.Equal(t, "data", bhReadAll(t, f))
	st := bhFstat(t, f)
	require.Equal(t, uint64(0), uint64(st.Nlink))
	require.Equal(t, int64(4), st.Size)
	_, err := f.WriteAt([]byte("+more"), 4)
	require.NoError(t, err)
	require.Equal(t, "data+more", bhReadAll(t, f))
	st = bhFstat(t, f)
	require.Equal(t, int64(9), st.Size)
	require.Equal(t, uint64(0), uint64(st.Nlink))
	require.NoError(t, unix.Ftruncate(int(f.Fd()), 2))
	require.Equal(t, "da", bhReadAll(t, f))
	bhClose(t, f)
	bhNoEntry(t, p)
	require.Empty(t, bhNames(t, dir))
}

// The scratch-file pattern: create, unlink, then use the fd, fsync
// included. Nothing written is lost while the fd is open.
func caseUnlinkOpenFileFsync(t *testing.T, dir string) {
	p := filepath.Join(dir, "scratch")
	f := bhOpen(t, p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	require.NoError(t, unix.Unlink(p))
	_, err := f.Write([]byte("spilled"))
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.Equal(t, "spilled", bhReadAll(t, f), "read after fsync")
	require.Equal(t, int64(7), bhFstat(t, f).Size)
	_, err = f.Write([]byte(" more"))
	require.NoError(t, err, "write after fsync")
	require.NoError(t, unix.Ftruncate(int(f.Fd()), 9), "ftruncate after fsync")
	require.Equal(t, "spilled m", bhReadAll(t, f))
	bhClose(t, f)
	require.Empty(t, bhNames(t, dir))
}

func caseUnlinkOpenReader(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "still here")
	r := bhOpen(t, p, os.O_RDONLY, 0)
	ino := bhFstat(t, r).Ino
	require.NoError(t, unix.Unlink(p))
	require.Equal(t, "still here", bhReadAll(t, r))
	st := bhFstat(t, r)
	require.Equal(t, uint64(0), uint64(st.Nlink))
	require.Equal(t, ino, st.Ino)
	require.Equal(t, int64(10), st.Size)
}

// A writer whose file was unlinked and made anew under the same name
// does not touch the new file.
func caseUnlinkRecreateWhileWriterOpen(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "first")
	w := bhOpen(t, p, os.O_RDWR, 0)
	_, err := w.WriteAt([]byte("FIRST"), 0)
	require.NoError(t, err)
	require.NoError(t, unix.Unlink(p))
	bhWrite(t, p, "second")
	_, err = w.WriteAt([]byte("!"), 5)
	require.NoError(t, err)
	require.Equal(t, "FIRST!", bhReadAll(t, w))
	bhClose(t, w)
	require.Equal(t, "second", bhRead(t, p))
	require.Equal(t, []string{"f"}, bhNames(t, dir))
}

// The save pattern of editors and config tools: write a temp file, then
// rename it over the name. Readers racing it always find the name (rename
// is atomic), and fstat describes the very file they read.
func caseOpenDuringAtomicReplace(t *testing.T, dir string) {
	p, tmp := filepath.Join(dir, "conf"), filepath.Join(dir, "conf.tmp")
	version := func(i int) []byte { return bytes.Repeat([]byte{'a' + byte(i%26)}, 1+i%97) }
	require.NoError(t, os.WriteFile(p, version(0), 0o644))
	deadline := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; time.Now().Before(deadline); i++ {
			if err := os.WriteFile(tmp, version(i), 0o644); err != nil {
				errs <- err
				return
			}
			if err := unix.Rename(tmp, p); err != nil {
				errs <- err
				return
			}
		}
	}()
	var mu sync.Mutex
	failed := map[string]int{} // kind of failure: count
	first := map[string]error{}
	opens := 0
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				err := readMatchesFstat(p)
				mu.Lock()
				opens++
				if err != nil {
					kind := "fstat/read mismatch"
					if errors.Is(err, unix.ENOENT) {
						kind = "ENOENT"
					} else if errno := unix.Errno(0); errors.As(err, &errno) {
						kind = errno.Error()
					}
					if failed[kind]++; first[kind] == nil {
						first[kind] = err
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for kind, n := range failed {
		t.Errorf("%d of %d opens: %s, first: %v", n, opens, kind, first[kind])
	}
}

// readMatchesFstat opens p, fstats it and reads it whole: the read must
// give st_size bytes, all the same letter (one version).
func readMatchesFstat(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	if int64(len(b)) != st.Size || st.Mode&unix.S_IFMT != unix.S_IFREG || len(b) == 0 || len(bytes.Trim(b, string(b[:1]))) != 0 {
		return fmt.Errorf("fstat says size %d mode %o, read gave %d bytes %.10q", st.Size, st.Mode, len(b), b)
	}
	return nil
}

// While a writer holds unsaved bytes, the size stat gives and the bytes
// a reader gets agree. (nginx sends st_size as Content-Length, then the
// file; PHP's file_get_contents sizes its buffer from fstat.)
func caseStatMatchesRead(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "c")
	// The writer is another process, as the CGI script is to the server.
	line, _, _ := bhHold(t, perlUnsaved, p)
	require.Equal(t, "written\n", line)
	st := bhStat(t, p)
	r := bhOpen(t, p, os.O_RDONLY, 0)
	rst := bhFstat(t, r)
	got := bhReadAll(t, r)
	assert.Equal(t, int64(len(got)), st.Size, "stat(path) size vs bytes read")
	assert.Equal(t, int64(len(got)), rst.Size, "fstat(reader) size vs bytes read")
}

// perlUnsaved writes 100 bytes into an open file and holds it open,
// unclosed, until its stdin closes.
const perlUnsaved = `open(my $fh, "+<", $ARGV[0]) or die "open: $!";
syswrite($fh, "w" x 100) == 100 or die "write: $!";
$| = 1; print "written\n";
<STDIN>;`

// A program that runs a command (system, popen, exec) while it holds a
// file open with unsaved writes: the child's exec closes its copy of the
// close-on-exec fd. Perl marks fds above 2 close-on-exec, as most
// runtimes do.
func caseForkExecWithOpenWriter(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "old")
	const prog = `open(my $f, "+<", $ARGV[0]) or die "open: $!";
syswrite($f, "NEW") == 3 or die "write: $!";
system("true") == 0 or die "system: $?";
syswrite($f, "!") == 1 or die "write: $!";
close($f) or die "close: $!";`
	out, err := bhRunOrAbort(t, dir, 10*time.Second, "perl", "-e", prog, p)
	require.NoError(t, err, "perl: %s", out)
	require.Equal(t, "NEW!", bhRead(t, p))
}

// bhRunOrAbort runs a command. If it is still running after limit, the
// test fails, and when dir is on a FUSE mount its connection is aborted,
// so that processes stuck in a request of a hung file system can end.
func bhRunOrAbort(t *testing.T, dir string, limit time.Duration, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-ctx.Done():
	}
	t.Errorf("%s still running after %v: hung", name, limit)
	bhLogFsGoroutines(t)
	bhAbortFuse(t, dir)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	t.FailNow()
	return "", nil
}

// bhLogFsGoroutines logs the goroutines of an in-process safefs that are
// inside package fs: where a hung request is stuck.
func bhLogFsGoroutines(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "github.com/safefs/safefs/fs.") {
			t.Logf("daemon goroutine:\n%s", g)
		}
	}
}

// bhAbortFuse aborts the FUSE connection of the mount that holds dir
// (through fusectl, mounted if needed). It does nothing off FUSE.
func bhAbortFuse(t *testing.T, dir string) {
	t.Helper()
	mounts, err := mountinfo.Read(mountinfo.Self)
	if err != nil {
		t.Logf("cannot abort: %v", err)
		return
	}
	conn, best := "", ""
	for _, m := range mounts {
		if !strings.HasPrefix(m.Type, "fuse") {
			continue
		}
		mp := m.Point
		if (dir == mp || strings.HasPrefix(dir, mp+"/")) && len(mp) > len(best) {
			best, conn = mp, m.Dev[strings.IndexByte(m.Dev, ':')+1:]
		}
	}
	if conn == "" {
		return
	}
	const ctl = "/sys/fs/fuse/connections"
	abort := filepath.Join(ctl, conn, "abort")
	if _, err := os.Stat(abort); err != nil {
		_ = unix.Mount("fusectl", ctl, "fusectl", 0, "")
	}
	if err := os.WriteFile(abort, []byte("1"), 0o200); err != nil {
		t.Logf("cannot abort FUSE connection %s of %s: %v", conn, best, err)
		return
	}
	t.Logf("aborted FUSE connection %s of %s", conn, best)
}

// --- safefs semantics, mount only ---

// SafefsCases check what safefs does on purpose differently from a
// plain file system. Run them against the top of a mount only.
var SafefsCases = []Case{
	{"SnapshotReaderKeepsOldVersion", caseSnapshotReader},
	{"SnapshotReaderFstat", caseSnapshotReaderFstat},
	{"UncommittedWritesInvisible", caseUncommittedInvisible},
	{"AppendsPlacedAtClose", caseAppendsAtClose},
	{"InternalDirHidden", caseInternalDirHidden},
}

func caseSnapshotReader(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "old version")
	r := bhOpen(t, p, os.O_RDONLY, 0)
	w := bhOpen(t, p, os.O_WRONLY|os.O_TRUNC, 0)
	_, err := w.Write([]byte("new"))
	require.NoError(t, err)
	bhClose(t, w)
	require.Equal(t, "old version", bhReadAll(t, r))
	require.Equal(t, "new", bhRead(t, p))
}

// fstat on a reader describes the version it reads.
func caseSnapshotReaderFstat(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "old version")
	r := bhOpen(t, p, os.O_RDONLY, 0)
	bhWrite(t, p, "new")
	got := bhReadAll(t, r)
	require.Equal(t, "old version", got)
	require.Equal(t, int64(len(got)), bhFstat(t, r).Size, "fstat size of the reader vs the bytes it reads")
}

func caseUncommittedInvisible(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "committed")
	w := bhOpen(t, p, os.O_RDWR, 0)
	_, err := w.WriteAt([]byte("PENDING!!"), 0)
	require.NoError(t, err)
	// Another open sees the committed version only. (Not another
	// process: forking while holding a dirty fd hangs, see ForkExecWithOpenWriter.)
	require.Equal(t, "committed", bhRead(t, p))
	require.Equal(t, "PENDING!!", bhReadAll(t, w))
	bhClose(t, w)
	require.Equal(t, "PENDING!!", bhRead(t, p))
}

func caseAppendsAtClose(t *testing.T, dir string) {
	p := filepath.Join(dir, "log")
	bhWrite(t, p, "start\n")
	a := bhOpen(t, p, os.O_WRONLY|os.O_APPEND, 0)
	b := bhOpen(t, p, os.O_WRONLY|os.O_APPEND, 0)
	for _, w := range []struct {
		f    *os.File
		line string
	}{{a, "a1\n"}, {b, "b1\n"}, {a, "a2\n"}} {
		_, err := w.f.Write([]byte(w.line))
		require.NoError(t, err)
	}
	require.Equal(t, "start\n", bhRead(t, p))
	bhClose(t, b)
	require.Equal(t, "start\nb1\n", bhRead(t, p))
	bhClose(t, a)
	require.Equal(t, "start\nb1\na1\na2\n", bhRead(t, p))
}

func caseInternalDirHidden(t *testing.T, dir string) {
	in := filepath.Join(dir, fs.InternalDir)
	bhWrite(t, filepath.Join(dir, "f"), "x") // a commit used staging/
	require.Equal(t, []string{"f"}, bhNames(t, dir))
	bhNoEntry(t, in)
	_, err := os.ReadDir(filepath.Join(in, journal.StagingDir))
	require.ErrorIs(t, err, unix.ENOENT)
	require.ErrorIs(t, unix.Mkdir(in, 0o755), unix.EPERM)
	_, err = unix.Open(in, unix.O_CREAT|unix.O_WRONLY, 0o644)
	require.ErrorIs(t, err, unix.EPERM)
	require.ErrorIs(t, unix.Symlink("x", in), unix.EPERM)
	require.ErrorIs(t, unix.Link(filepath.Join(dir, "f"), in), unix.EPERM)
	require.ErrorIs(t, unix.Rename(filepath.Join(dir, "f"), in), unix.EPERM)
	require.ErrorIs(t, unix.Unlink(in), unix.ENOENT)
	require.ErrorIs(t, unix.Rmdir(in), unix.ENOENT)
	// Below the top, the name is an ordinary one.
	require.NoError(t, os.Mkdir(filepath.Join(dir, "d"), 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "d", fs.InternalDir), 0o755))
	require.Equal(t, []string{fs.InternalDir}, bhNames(t, filepath.Join(dir, "d")))
}
