package testfs

// Behaviour cases: metadata: modes, owners, times, extended
// attributes, statfs and access checks.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

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
