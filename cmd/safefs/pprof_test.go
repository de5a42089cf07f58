package main

import (
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPprofOptionValues(t *testing.T) {
	for v, ok := range map[string]bool{
		"127.0.0.1:6060": true, "[::1]:6060": true, "localhost:6060": true,
		"0.0.0.0:6060": false, ":6060": false, "6060": false, "10.1.2.3:6060": false,
		"example.com:6060": false, "127.0.0.1:": false,
		"unix:/run/safefs/pprof.sock": true, "unix:pprof.sock": true, "unix:": false, "unix:/run/safefs/": false,
	} {
		_, err := parseMountArgs([]string{"-o", "pprof=" + v, "b", "m"})
		if ok {
			assert.NoError(t, err, v)
		} else {
			assert.Equal(t, exitUsage, exitCode(err), "%s: %v", v, err)
		}
	}
}

func mkdirs(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		require.NoError(t, os.Mkdir(d, 0o755))
	}
}

// freeAddr returns a loopback address nothing listens on (just now).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// The real daemon serves profiles of itself on the address it was given.
func TestPprofServesProfiles(t *testing.T) {
	requireFuse(t)
	requireRoot(t)
	dir := tempDir(t)
	backing, mnt := filepath.Join(dir, "backing"), filepath.Join(dir, "mnt")
	mkdirs(t, backing, mnt)
	addr := freeAddr(t)
	p := launchMount(t, exec.Command(safefsBin, "mount", "-o", "pprof="+addr, backing, mnt), mnt)
	p.waitMounted(t)
	c := http.Client{Timeout: waitLimit}
	resp, err := c.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	// The FUSE server's goroutines: the profile is the daemon's own.
	assert.Contains(t, string(body), "go-fuse")
	stopMount(t, p)
}

// An address in use fails before mounting, with exit 2 and the address named.
func TestPprofAddressInUse(t *testing.T) {
	requireFuse(t)
	requireRoot(t)
	dir := tempDir(t)
	backing, mnt := filepath.Join(dir, "backing"), filepath.Join(dir, "mnt")
	mkdirs(t, backing, mnt)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	addr := ln.Addr().String()
	start := time.Now()
	// A mount that wrongly goes ahead would serve until the guard timeout.
	r := runSafefs(t, nil, "mount", "-o", "pprof="+addr, backing, mnt)
	t.Cleanup(func() { unmountIfMounted(t, mnt) })
	assert.Equal(t, exitUsage, r.code, "stderr:\n%s (after %v)", r.stderr, time.Since(start))
	assert.Contains(t, r.stderr, "pprof="+addr)
	assert.True(t, strings.Contains(r.stderr, "address already in use"), r.stderr)
	_, mounted := mountType(t, mnt)
	assert.False(t, mounted, "mounted although the pprof address was in use")
}
