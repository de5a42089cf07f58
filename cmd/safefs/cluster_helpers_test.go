package main

// Helpers of the cluster tests: a real etcd (Debian's etcd-server) on
// free ports in a temp dir, and safefs daemons of one cluster.

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testLeaseTTL is the daemons' lease: short, so that tests that wait for
// a lease to expire are quick (etcd's shortest is about 2 s).
const testLeaseTTL = "2s"

type etcdServer struct {
	dir, url, peer string
	p              *proc
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startEtcd starts an etcd that the test's cleanup kills.
func startEtcd(t *testing.T) *etcdServer {
	t.Helper()
	requireTool(t, "etcd")
	e := &etcdServer{dir: t.TempDir(),
		url:  fmt.Sprintf("http://127.0.0.1:%d", freePort(t)),
		peer: fmt.Sprintf("http://127.0.0.1:%d", freePort(t))}
	e.start(t)
	return e
}

func (e *etcdServer) start(t *testing.T) {
	t.Helper()
	cmd := exec.Command("etcd", "--name", "test", "--data-dir", filepath.Join(e.dir, "data"),
		"--listen-client-urls", e.url, "--advertise-client-urls", e.url,
		"--listen-peer-urls", e.peer, "--initial-advertise-peer-urls", e.peer,
		"--initial-cluster", "test="+e.peer)
	e.p = startProc(t, cmd)
	deadline := time.Now().Add(mountLimit)
	for {
		resp, err := http.Get(e.url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd not healthy after %v: %v\n%s", mountLimit, err, e.p.out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill stops etcd at once (SIGKILL), as a crash would.
func (e *etcdServer) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, e.p.cmd.Process.Kill())
	e.p.waitExit(t, waitLimit)
}

// clusterOpts are the -o options of node in the cluster served by e.
func clusterOpts(e *etcdServer, node string, more ...string) string {
	opts := append([]string{"cluster=etcd", "etcd=" + e.url, "cluster_name=test", "node=" + node,
		"lease_ttl=" + testLeaseTTL}, more...)
	return strings.Join(opts, ",")
}

// startNode mounts backing on a new mount point as node; env is added
// to the daemon's environment (SAFEFS_STOP_AT, ...).
func startNode(t *testing.T, e *etcdServer, backing, node string, env ...string) (*mountProc, string) {
	t.Helper()
	mnt := filepath.Join(tempDir(t), "mnt-"+node)
	require.NoError(t, os.Mkdir(mnt, 0o755))
	return startNodeAt(t, e, backing, mnt, node, env...), mnt
}

func startNodeAt(t *testing.T, e *etcdServer, backing, mnt, node string, env ...string) *mountProc {
	t.Helper()
	cmd := exec.Command(safefsBin, "mount", "-o", clusterOpts(e, node, "lock_timeout=30s"), backing, mnt)
	cmd.Env = append(os.Environ(), env...)
	p := launchMount(t, cmd, mnt)
	p.waitMounted(t)
	return p
}

// waitLine waits for a log line of p that holds s.
func waitLine(t *testing.T, p *proc, s string) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !strings.Contains(p.out.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log after %v:\n%s", s, waitLimit, p.out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// perl runs a Perl program with args and returns its output; it must
// exit 0.
func perl(t *testing.T, prog string, args ...string) string {
	t.Helper()
	out, err := exec.Command("perl", append([]string{"-e", prog}, args...)...).CombinedOutput()
	require.NoError(t, err, "perl: %s", out)
	return string(out)
}

// detach unmounts mnt lazily, for a daemon that was killed.
func detach(t *testing.T, mnt string) {
	t.Helper()
	require.NoError(t, syscall.Unmount(mnt, syscall.MNT_DETACH))
}
