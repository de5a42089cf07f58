package main

// The status socket with BACKING owned by www-data, who can swap
// .safefs for a symlink at any moment: the daemon must make and remove
// its socket through the directory it checked, and `safefs status` must
// not ask a socket in a directory that is not the daemon's.

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/safefs/safefs/fs"
)

// reachableDir is a temp dir that www-data can reach (t.TempDir's are
// 0700, and so is their parent).
func reachableDir(t *testing.T) string {
	t.Helper()
	dir := tempDir(t)
	for _, d := range []string{dir, filepath.Dir(dir)} {
		require.NoError(t, os.Chmod(d, 0o755))
	}
	return dir
}

// asWWW runs a shell script as www-data (setpriv), which must succeed.
func asWWW(t *testing.T, script string, args ...string) {
	t.Helper()
	cmd := exec.Command(requireTool(t, "setpriv"), append([]string{"--reuid=www-data", "--regid=www-data",
		"--clear-groups", "--", "/bin/sh", "-ec", script, "sh"}, args...)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "as www-data: %s\n%s", script, out)
}

// chownWWW gives dir to www-data.
func chownWWW(t *testing.T, dir string) {
	t.Helper()
	out, err := exec.Command("chown", "www-data:www-data", dir).CombinedOutput()
	require.NoError(t, err, "%s", out)
}

// rootFile is a root-only directory (as /etc is) holding a file named
// status.sock; check fails unless both are as they were.
func rootFile(t *testing.T) (dir string, check func(when string)) {
	t.Helper()
	dir = reachableDir(t)
	f := filepath.Join(dir, statusSock)
	require.NoError(t, os.WriteFile(f, []byte("root's own\n"), 0o644))
	return dir, func(when string) {
		t.Helper()
		b, err := os.ReadFile(f)
		if assert.NoError(t, err, "%s: root's file is gone", when) {
			assert.Equal(t, "root's own\n", string(b), when)
		}
		var st syscall.Stat_t
		if assert.NoError(t, syscall.Lstat(f, &st), when) {
			assert.Equal(t, uint32(syscall.S_IFREG|0o644), st.Mode, "%s: root's file's mode", when)
		}
		ents, err := os.ReadDir(dir)
		require.NoError(t, err)
		assert.Len(t, ents, 1, "%s: root's directory gained entries", when)
	}
}

// TestStatusSocketInternalSwapped: www-data swaps .safefs for a symlink
// to a root-only directory after the daemon has checked it and before it
// makes its socket. The old daemon removed root's file there by path and
// bound its socket in its place; now the socket is made, and removed at
// unmount, in the directory the daemon checked (wherever it was moved),
// mode 0600 from the start.
func TestStatusSocketInternalSwapped(t *testing.T) {
	requireFuse(t)
	requireRoot(t)
	backing, mnt := reachableDir(t), tempDir(t)
	chownWWW(t, backing)
	target, check := rootFile(t)

	cmd := exec.Command(safefsBin, "mount", backing, mnt)
	cmd.Env = append(os.Environ(), stopEnv+"=mount-served")
	p := launchMount(t, cmd, mnt)
	waitLine(t, p.proc, "stop point reached")
	asWWW(t, `cd "$1" && mv .safefs .safefs-aside && ln -s "$2" .safefs`, backing, target)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGCONT))
	p.waitMounted(t)
	check("mounted")

	sock := filepath.Join(backing, ".safefs-aside", statusSock)
	var st syscall.Stat_t
	require.NoError(t, syscall.Lstat(sock, &st), "no socket in the checked directory; log:\n%s", p.out)
	assert.Equal(t, uint32(syscall.S_IFSOCK|0o600), st.Mode, "the socket's mode")
	assert.Equal(t, uint32(0), st.Uid)

	// status does not follow the symlink either.
	r := runSafefs(t, nil, "status", mnt)
	assert.Equal(t, exitNotSafefs, r.code, "stdout:\n%s", r.stdout)
	assertOneLine(t, r.stderr, "not safefs's own (a symlink)")

	stopMount(t, p)
	assert.NoFileExists(t, sock, "the socket outlived the mount")
	check("unmounted")
}

// TestStatusAsksOnlyTheDaemonsDirectory: a .safefs that is not root's,
// or a symlink, holds a socket that answers whatever its maker likes
// (here www-data's forged status): status refuses to ask it.
func TestStatusAsksOnlyTheDaemonsDirectory(t *testing.T) {
	requireRoot(t)
	requireTool(t, "perl")
	for _, how := range []string{"symlink", "own"} {
		t.Run(how, func(t *testing.T) {
			backing, theirs := reachableDir(t), reachableDir(t)
			chownWWW(t, backing)
			chownWWW(t, theirs)
			dir := filepath.Join(backing, fs.InternalDir)
			if how == "symlink" {
				require.NoError(t, os.Symlink(theirs, dir))
			} else {
				asWWW(t, `mkdir -m 0700 "$1"`, dir)
				theirs = dir
			}
			// www-data's server: one forged answer to each connection.
			server := exec.Command(requireTool(t, "setpriv"), "--reuid=www-data", "--regid=www-data", "--clear-groups", "--",
				"perl", "-MIO::Socket::UNIX", "-e", `
				my $l = IO::Socket::UNIX->new(Local => $ARGV[0], Listen => 5) or die "listen: $!";
				print "listening\n"; $| = 1;
				while (my $c = $l->accept) { print $c qq({"status":{"mountpoint":"FORGED","locks":[],"writers":[],"rejected":[]}}\n); close $c }`,
				filepath.Join(theirs, statusSock))
			sp := startProc(t, server)
			waitLine(t, sp, "listening")
			r := runSafefs(t, nil, "status", backing)
			assert.NotContains(t, r.stdout, "FORGED")
			assert.Equal(t, exitNotSafefs, r.code, "stdout:\n%s", r.stdout)
			assertOneLine(t, r.stderr, "not safefs's own")
		})
	}
}
