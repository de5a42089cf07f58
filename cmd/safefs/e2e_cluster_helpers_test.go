package main

// Helpers of the cluster tests: a real etcd (Debian's etcd-server) on
// free ports in a temp dir, and safefs daemons of one cluster.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/safefs/safefs/scriptlock/etcdtest"
)

// testLeaseTTL is the daemons' lease: short, so that tests that wait for
// a lease to expire are quick (etcd's shortest is about 2 s).
const testLeaseTTL = "2s"

// startEtcd starts an etcd that the test's cleanup kills.
func startEtcd(t *testing.T) *etcdtest.Server { return etcdtest.Start(t) }

// clusterOpts are the -o options of node in the cluster served by e.
func clusterOpts(e *etcdtest.Server, node string, more ...string) string {
	opts := append([]string{"cluster=etcd", "etcd=" + e.URL, "cluster_name=test", "node=" + node,
		"lease_ttl=" + testLeaseTTL}, more...)
	return strings.Join(opts, ",")
}

// startNode mounts backing on a new mount point as node; env is added
// to the daemon's environment (SAFEFS_STOP_AT, ...).
func startNode(t *testing.T, e *etcdtest.Server, backing, node string, env ...string) (*mountProc, string) {
	t.Helper()
	mnt := nodeMnt(t, node)
	return startNodeAt(t, e, backing, mnt, node, env...), mnt
}

// nodeMnt makes a mount point for node.
func nodeMnt(t *testing.T, node string) string {
	t.Helper()
	mnt := filepath.Join(tempDir(t), "mnt-"+node)
	require.NoError(t, os.Mkdir(mnt, 0o755))
	return mnt
}

func startNodeAt(t *testing.T, e *etcdtest.Server, backing, mnt, node string, env ...string) *mountProc {
	t.Helper()
	return startNodeWith(t, e, backing, mnt, node, nil, env)
}

// startNodeWith is startNodeAt with more -o options.
func startNodeWith(t *testing.T, e *etcdtest.Server, backing, mnt, node string, more, env []string) *mountProc {
	t.Helper()
	cmd := exec.Command(safefsBin, "mount", "-o", clusterOpts(e, node, append([]string{"lock_timeout=30s"}, more...)...), backing, mnt)
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
