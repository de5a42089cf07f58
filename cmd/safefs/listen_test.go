package main

// metrics and pprof on a unix socket: a loopback TCP address is open to
// every local user (www-data read the profiles, and asking for them in
// a loop slowed every open down); unix:PATH is a 0600 socket, root's.

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// getUnix GETs path over the unix socket sock and returns the body.
func getUnix(t *testing.T, sock, path string) string {
	t.Helper()
	c := http.Client{Timeout: waitLimit, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	resp, err := c.Get("http://safefs" + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	return string(body)
}

// connectAs tries to connect to sock as user, and says what happened.
func connectAs(t *testing.T, user, sock string) string {
	t.Helper()
	out, err := exec.Command(requireTool(t, "setpriv"), "--reuid="+user, "--regid="+user, "--clear-groups", "--",
		"perl", "-MIO::Socket::UNIX", "-e", `print IO::Socket::UNIX->new(Peer => $ARGV[0]) ? "connected\n" : "$!\n"`, sock).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return strings.TrimSpace(string(out))
}

func TestMetricsAndPprofOnUnixSockets(t *testing.T) {
	requireFuse(t)
	requireRoot(t)
	requireTool(t, "perl")
	dir := reachableDir(t)
	backing, mnt := filepath.Join(dir, "backing"), filepath.Join(dir, "mnt")
	mkdirs(t, backing, mnt)
	metricsSock, pprofSock := filepath.Join(dir, "metrics.sock"), filepath.Join(dir, "pprof.sock")
	p := launchMount(t, exec.Command(safefsBin, "mount", "-o", "metrics=unix:"+metricsSock+",pprof=unix:"+pprofSock, backing, mnt), mnt)
	p.waitMounted(t)
	assert.Contains(t, p.out.String(), `"socket": "`+metricsSock+`"`)

	for _, sock := range []string{metricsSock, pprofSock} {
		var st syscall.Stat_t
		require.NoError(t, syscall.Lstat(sock, &st), sock)
		assert.Equal(t, uint32(syscall.S_IFSOCK|0o600), st.Mode, "%s's mode", sock)
		assert.Equal(t, uint32(0), st.Uid, "%s's owner", sock)
		assert.Equal(t, "Permission denied", connectAs(t, "www-data", sock), "www-data connecting to %s", sock)
	}
	assert.Contains(t, getUnix(t, metricsSock, "/metrics"), "safefs_too_many_files_total 0")
	assert.Contains(t, getUnix(t, pprofSock, "/debug/pprof/goroutine?debug=1"), "go-fuse")

	stopMount(t, p)
	assert.NoFileExists(t, metricsSock, "the socket outlived the mount")
	assert.NoFileExists(t, pprofSock, "the socket outlived the mount")
}

// A unix:PATH that is not a stale socket (a file, a symlink to root's
// file) is refused and left as it is, and so is a directory others may
// write in (they could put their own socket in the daemon's place).
func TestUnixSocketRefusals(t *testing.T) {
	requireFuse(t)
	requireRoot(t)
	dir := reachableDir(t)
	backing, mnt := filepath.Join(dir, "backing"), filepath.Join(dir, "mnt")
	mkdirs(t, backing, mnt)
	target := filepath.Join(dir, "passwd")
	require.NoError(t, os.WriteFile(target, []byte("root's\n"), 0o644))
	link := filepath.Join(dir, "link.sock")
	require.NoError(t, os.Symlink(target, link))
	open := filepath.Join(dir, "open")
	require.NoError(t, os.Mkdir(open, 0o777))
	require.NoError(t, os.Chmod(open, 0o777)) // past the umask

	for _, c := range []struct {
		opt  string
		code int
		msg  string
	}{
		{"metrics=unix:" + link, exitMetrics, "exists and is not a socket"},
		{"metrics=unix:" + target, exitMetrics, "exists and is not a socket"},
		{"pprof=unix:" + link, exitUsage, "exists and is not a socket"},
		{"metrics=unix:" + filepath.Join(open, "m.sock"), exitMetrics, "writable by others (mode 0777)"},
	} {
		r := runSafefs(t, nil, "mount", "-o", c.opt, backing, mnt)
		t.Cleanup(func() { unmountIfMounted(t, mnt) })
		assert.Equal(t, c.code, r.code, "%s: stderr:\n%s", c.opt, r.stderr)
		assertOneLine(t, r.stderr, c.msg)
		_, mounted := mountType(t, mnt)
		assert.False(t, mounted, c.opt)
	}
	b, err := os.ReadFile(target)
	require.NoError(t, err)
	assert.Equal(t, "root's\n", string(b))
	var st syscall.Stat_t
	require.NoError(t, syscall.Lstat(target, &st))
	assert.Equal(t, uint32(syscall.S_IFREG|0o644), st.Mode)
	require.NoError(t, syscall.Lstat(link, &st))
	assert.Equal(t, uint32(syscall.S_IFLNK), st.Mode&syscall.S_IFMT)
	ents, err := os.ReadDir(open)
	require.NoError(t, err)
	assert.Empty(t, ents)
}
