package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/safefs/safefs/testfs"
)

func TestFuseConfAllowsOther(t *testing.T) {
	assert.False(t, fuseConfAllowsOther("# user_allow_other - lets users...\n#user_allow_other\n\n#mount_max = 1000\n"))
	assert.True(t, fuseConfAllowsOther("#mount_max = 1000\nuser_allow_other\n"))
	assert.True(t, fuseConfAllowsOther("  user_allow_other  # for the web server\n"))
	assert.False(t, fuseConfAllowsOther("user_allow_other_not\n"))
}

// TestMountAndUnmountFailuresOneLine: go-fuse's texts for a fusermount3
// that failed become one line naming fusermount3 and the way out.
func TestMountAndUnmountFailuresOneLine(t *testing.T) {
	got := mountFailure(errors.New("fusermount exited with code 256\n"))
	assert.NotContains(t, got, "\n")
	assert.NotContains(t, got, "code 256")
	assert.Contains(t, got, "fusermount3 refused the mount (exit status 1)")
	assert.Contains(t, got, "run safefs as root")

	notFound := &exec.Error{Name: "/bin/fusermount", Err: os.ErrNotExist}
	assert.Contains(t, mountFailure(notFound), "install the fuse3 package")

	busy := errors.New("fusermount3: failed to unmount /var/www/data: Device or resource busy\n (code exit status 1)\n")
	got = unmountFailure(busy, "/var/www/data")
	assert.Equal(t, "/var/www/data is busy: a process has its working directory or a file open in it "+
		"(fuser -vm /var/www/data lists them): fusermount3: failed to unmount /var/www/data: "+
		"Device or resource busy (exit status 1)", got)
	// Root without fuse3: umount2 failed, and go-fuse's fallback found
	// no fusermount to try again.
	got = unmountFailure(&exec.Error{Name: "/bin/fusermount", Err: os.ErrNotExist}, "/m")
	assert.Equal(t, "the kernel refused the unmount, most likely because /m is busy: a process has its "+
		"working directory or a file open in it (fuser -vm /m lists them)", got)
}

func TestFindFusermount(t *testing.T) {
	have := func(paths ...string) func(string) (string, error) {
		return func(p string) (string, error) {
			if slices.Contains(paths, p) {
				return "/usr/bin/" + filepath.Base(p), nil
			}
			return "", exec.ErrNotFound
		}
	}
	assert.Equal(t, "/usr/bin/fusermount3", findFusermount(have("fusermount3", "fusermount")))
	assert.Equal(t, "/usr/bin/fusermount3", findFusermount(have("/bin/fusermount3")))
	assert.Equal(t, "/usr/bin/fusermount", findFusermount(have("fusermount")))
	assert.Equal(t, "", findFusermount(have()))
	assert.NoError(t, checkFusermount(0, have()), "root mounts without fusermount3")
	assert.NoError(t, checkFusermount(33, have("fusermount3")))
	err := checkFusermount(33, have())
	require.Error(t, err)
	assert.Equal(t, exitNoFuse, exitCode(err))
}

// nonRootSetup is a BACKING and MOUNTPOINT of www-data's, and a copy of
// the binary, all in a directory www-data can reach.
func nonRootSetup(t *testing.T) (bin, backing, mnt string) {
	t.Helper()
	requireFuse(t)
	www := testfs.LookupUser(t, "www-data")
	dir := reachableDir(t)
	bin, backing, mnt = filepath.Join(dir, "safefs"), filepath.Join(dir, "b"), filepath.Join(dir, "m")
	copyFile(t, safefsBin, bin)
	require.NoError(t, os.Chmod(bin, 0o755))
	for _, d := range []string{backing, mnt} {
		require.NoError(t, os.Mkdir(d, 0o755))
		require.NoError(t, os.Chown(d, int(www.Uid), int(www.Gid)))
	}
	return bin, backing, mnt
}

// TestNonRootWithoutFuse3: a user other than root on a machine without
// fusermount3 is told to install fuse3 or run as root, in one line, not
// the missing /bin/fusermount of fuse 2 that go-fuse would name. The
// helpers are hidden in a mount namespace of the test's own.
func TestNonRootWithoutFuse3(t *testing.T) {
	requireTool(t, "unshare")
	setpriv := requireTool(t, "setpriv")
	bin, backing, mnt := nonRootSetup(t)
	t.Cleanup(func() { unmountIfMounted(t, mnt) })
	var hide []string
	for _, p := range []string{"fusermount3", "fusermount", "/bin/fusermount3", "/bin/fusermount", "/usr/bin/fusermount3"} {
		if found, err := exec.LookPath(p); err == nil {
			if real, err := filepath.EvalSymlinks(found); err == nil && !slices.Contains(hide, real) {
				hide = append(hide, real)
			}
		}
	}
	script := `for f in $HIDE; do mount --bind /dev/null "$f" || exit 99; done
exec "$0" --reuid=www-data --regid=www-data --clear-groups -- "$@"`
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script,
		setpriv, bin, "mount", backing, mnt)
	cmd.Env = append(os.Environ(), "HIDE="+strings.Join(hide, " "), "PATH=/usr/sbin:/usr/bin:/sbin:/bin")
	r := runResult(t, cmd, "safefs as www-data without fusermount3", nil)
	require.NotEqual(t, 99, r.code, "could not hide %v: %s", hide, r.stderr)
	assert.Equal(t, exitNoFuse, r.code, r.stderr)
	assertOneLine(t, r.stderr, "needs fusermount3, which is not installed: install the fuse3 package (apt-get install fuse3), or run safefs as root")
	assert.NotContains(t, r.stderr, "/bin/fusermount")
}

// TestNonRootFusermountRefuses: fusermount3 refusing a mount (the
// mountpoint is not www-data's) gives a line that names it and the way
// out, not go-fuse's "fusermount exited with code 256".
func TestNonRootFusermountRefuses(t *testing.T) {
	requireTool(t, "fusermount3")
	www := testfs.LookupUser(t, "www-data")
	bin, backing, _ := nonRootSetup(t)
	mnt := filepath.Join(filepath.Dir(backing), "roots")
	require.NoError(t, os.Mkdir(mnt, 0o755)) // root's: www-data may not mount on it
	t.Cleanup(func() { unmountIfMounted(t, mnt) })
	cmd := testfs.AsUser(exec.Command(bin, "mount", backing, mnt), www)
	r := runResult(t, cmd, "safefs mount as www-data", nil)
	assert.Equal(t, exitMount, r.code, r.stderr)
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	last := lines[len(lines)-1]
	assert.Contains(t, last, "safefs: mount failed: fusermount3 refused the mount (exit status 1)")
	assert.Contains(t, last, "or run safefs as root")
	assert.NotContains(t, r.stderr, "code 256")
}

// TestNonRootAllowOtherNeedsConf: allow_other for a user other than root
// without user_allow_other in /etc/fuse.conf is refused in one line that
// says where to add it, before fusermount3 would refuse it.
func TestNonRootAllowOtherNeedsConf(t *testing.T) {
	if data, err := os.ReadFile(fuseConf); err == nil && fuseConfAllowsOther(string(data)) {
		t.Skipf("%s has user_allow_other on this machine", fuseConf)
	}
	www := testfs.LookupUser(t, "www-data")
	bin, backing, mnt := nonRootSetup(t)
	t.Cleanup(func() { unmountIfMounted(t, mnt) })
	r := runResult(t, testfs.AsUser(exec.Command(bin, "mount", "-o", "allow_other", backing, mnt), www), "safefs mount", nil)
	assert.Equal(t, exitMount, r.code, r.stderr)
	assertOneLine(t, r.stderr, "allow_other as a user other than root needs a user_allow_other line in /etc/fuse.conf")
}

// TestSIGTERMWhileBusy: SIGTERM on a busy mount logs one line that says
// the mount point is busy and how to find who holds it (no raw newline
// of fusermount3's text in it), keeps serving, and a second SIGTERM once
// the holder is gone unmounts.
func TestSIGTERMWhileBusy(t *testing.T) {
	requireFuse(t)
	backing, mnt := tempDir(t), tempDir(t)
	p := startMount(t, backing, mnt)
	holder := exec.Command("sleep", "600")
	holder.Dir = mnt
	h := startProc(t, holder)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	line := waitOutput(t, p.proc, "unmount failed")
	assert.NotContains(t, line, `\n`, "a raw newline in the log line")
	assert.Contains(t, line, mnt+" is busy")
	assert.Contains(t, line, "fuser -vm "+mnt)
	_, ok := mountType(t, mnt)
	assert.True(t, ok, "not mounted after the failed unmount")
	h.reap(t, waitLimit)
	stopMount(t, p)
}

// TestAllowOtherWarning: mounting without allow_other over files of
// another user (www-data's CGI data) logs a warning naming allow_other,
// since the kernel refuses www-data before any request reaches safefs;
// the fstab form says it on the terminal too. With allow_other, or over
// the mounter's own files, nothing is said.
func TestAllowOtherWarning(t *testing.T) {
	requireFuse(t)
	www := testfs.LookupUser(t, "www-data")
	const warning = "without -o allow_other only uid 0 may use the mount"
	dir := reachableDir(t)
	backing := filepath.Join(dir, "data")
	require.NoError(t, os.Mkdir(backing, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(backing, "counter.txt"), []byte("1\n"), 0o644))
	require.NoError(t, os.Chown(filepath.Join(backing, "counter.txt"), int(www.Uid), int(www.Gid)))

	mnt := filepath.Join(dir, "mnt")
	require.NoError(t, os.Mkdir(mnt, 0o755))
	p := startMount(t, backing, mnt)
	line := waitOutput(t, p.proc, warning)
	assert.Contains(t, line, "WARN")
	assert.Contains(t, line, "uid 33 (www-data)")
	out, err := testfs.AsUser(exec.Command("cat", filepath.Join(mnt, "counter.txt")), www).CombinedOutput()
	assert.Error(t, err, "www-data read the mount without allow_other")
	assert.Contains(t, string(out), "Permission denied")
	stopMount(t, p)
	assert.Equal(t, 1, strings.Count(p.out.String(), warning), "said once:\n%s", p.out)

	p = launchMount(t, exec.Command(safefsBin, "mount", "-o", "allow_other", backing, mnt), mnt)
	p.waitMounted(t)
	stopMount(t, p)
	assert.NotContains(t, p.out.String(), "allow_other only", "warned with allow_other")

	mine := tempDir(t)
	p = startMount(t, mine, mnt)
	stopMount(t, p)
	assert.NotContains(t, p.out.String(), "allow_other only", "warned over root's own files")

	t.Run("fstab form", func(t *testing.T) {
		requireTool(t, "nsenter")
		becomeSubreaper(t)
		logf := filepath.Join(t.TempDir(), "log")
		r := nsMount(t, "", "-t", "fuse.safefs", "-o", "log_file="+logf, backing, mnt)
		require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
		pid := adoptDaemon(t)
		assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "stderr: %q", r.stderr)
		assert.Contains(t, r.stderr, "safefs: warning: files in "+backing+" belong to uid 33 (www-data), but "+warning)
		out, err := exec.Command("nsenter", "-t", strconv.Itoa(pid), "-m", "umount", mnt).CombinedOutput()
		require.NoError(t, err, "umount: %s", out)
		ws := reapDaemon(t, pid)
		assert.True(t, ws.Exited() && ws.ExitStatus() == 0, "daemon ended with %v", ws)
		log, err := os.ReadFile(logf)
		require.NoError(t, err)
		assert.Contains(t, string(log), warning)
	})
}
