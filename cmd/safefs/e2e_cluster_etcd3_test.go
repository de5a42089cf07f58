package main

// Cluster mode over an etcd cluster of three members, as a real
// deployment runs it: the daemons get every member's URL, and the
// leader's death in the middle of a workload is an election, not an
// outage.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/scriptlock/etcdtest"
)

// carefulCounter is the careful CGI counter: open +<, flock LOCK_EX,
// read, seek, print, truncate, close, n times. A step that fails prints
// "err STEP ERRNO" and the increment is tried again (a failed close
// committed nothing); each increment done prints "ok I".
const carefulCounter = `
use Fcntl qw(:flock SEEK_SET);
$| = 1;
my ($file, $n) = @ARGV;
my $errs = 0;
for (my $i = 1; $i <= $n && $errs < 50;) {
    open(my $f, '+<', $file) or do { printf "err open %d\n", $!+0; $errs++; next };
    flock($f, LOCK_EX) or do { printf "err flock %d\n", $!+0; $errs++; close($f); next };
    my $c = <$f>;
    seek($f, 0, SEEK_SET) or do { printf "err seek %d\n", $!+0; $errs++; close($f); next };
    print $f $c + 1, "\n";
    truncate($f, tell($f)) or do { printf "err truncate %d\n", $!+0; $errs++; close($f); next };
    close($f) or do { printf "err close %d\n", $!+0; $errs++; next };
    print "ok $i\n";
    $i++;
}`

// etcd3LeaseTTL is the default lease_ttl: testLeaseTTL (2 s) is shorter
// than what an election can take, so with it a leader's death costs
// every daemon its lease.
const etcd3LeaseTTL = "10s"

// startNodeEtcd mounts backing as node of cluster "test" with every
// member of c as its etcd endpoints (etcd=URL+URL+URL).
func startNodeEtcd(t *testing.T, c *etcdtest.Cluster, backing, node string) (*mountProc, string) {
	t.Helper()
	mnt := nodeMnt(t, node)
	opts := strings.Join([]string{"cluster=etcd", "etcd=" + strings.Join(c.Endpoints(), "+"), "cluster_name=test",
		"node=" + node, "lease_ttl=" + etcd3LeaseTTL, "lock_timeout=30s"}, ",")
	p := launchMount(t, exec.Command(safefsBin, "mount", "-o", opts, backing, mnt), mnt)
	p.waitMounted(t)
	return p, mnt
}

// etcdRevision is the cluster's current revision, asked of any member
// still running.
func etcdRevision(t *testing.T, c *etcdtest.Cluster, skip *etcdtest.Server) int64 {
	t.Helper()
	var eps []string
	for _, s := range c.Members {
		if s != skip {
			eps = append(eps, s.URL)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	r, err := cli.Get(ctx, "/safefs/test/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	return r.Header.Revision
}

// Two daemons over one BACKING, each pointed at all three members of an
// etcd cluster; careful counters, 4 processes through each mount, 50
// increments each; the etcd leader is killed (SIGKILL) in the middle.
// The election is a pause, not an error: no step of any script fails
// (lock requests and commits wait for the new leader), the counter is
// exact, and the daemons stay in cluster mode (their commits after the
// kill went through etcd: its revision grew by at least one per commit).
func TestClusterEtcdLeaderKilled(t *testing.T) {
	clusterPrereqs(t)
	c := etcdtest.StartCluster(t, 3)
	backing := tempDir(t)
	require.NoError(t, os.WriteFile(filepath.Join(backing, "count"), []byte("0\n"), 0o644))
	d1, m1 := startNodeEtcd(t, c, backing, "h1")
	d2, m2 := startNodeEtcd(t, c, backing, "h2")
	const hosts, perHost, runs = 2, 4, 50
	var ps []*proc
	for i := range hosts * perHost {
		mnt := []string{m1, m2}[i%hosts]
		ps = append(ps, startProc(t, exec.Command("perl", "-e", carefulCounter, filepath.Join(mnt, "count"), strconv.Itoa(runs))))
	}
	start := time.Now()
	waitLine(t, ps[0], "ok 15\n")
	leader, err := c.Leader()
	require.NoError(t, err)
	leader.Kill()
	killedAt := time.Since(start)
	before := etcdRevision(t, c, leader)
	doneAtKill := 0
	for _, p := range ps {
		doneAtKill += strings.Count(p.out.String(), "ok ")
	}
	newLeader, err := c.Leader()
	require.NoError(t, err)
	require.NotSame(t, leader, newLeader)

	oks := 0
	defer func() {
		if t.Failed() {
			t.Logf("h1's warnings:\n%s\nh2's warnings:\n%s", warnings(d1.out.String()), warnings(d2.out.String()))
		}
	}()
	for i, p := range ps {
		for _, l := range strings.Split(strings.TrimSpace(p.wait(t)), "\n") {
			f := strings.Fields(l)
			require.True(t, len(f) == 2 && f[0] == "ok", "counter %d: %q (a step failed across the election)", i, l)
			oks++
		}
	}
	took := time.Since(start)
	require.Equal(t, hosts*perHost*runs, oks, "increments done")
	b, err := os.ReadFile(filepath.Join(backing, "count"))
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("%d\n", hosts*perHost*runs), string(b), "the counter")
	after := etcdRevision(t, c, leader)
	require.GreaterOrEqual(t, after-before, int64(oks-doneAtKill), "commits after the kill went through etcd")
	for _, mnt := range []string{m1, m2} {
		r := runSafefs(t, nil, "status", mnt, "--json")
		require.Equal(t, exitOK, r.code, "status %s: %s", mnt, r.stderr)
		var st fs.Status
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
		require.NotEmpty(t, st.Node, "status of %s: still a cluster node", mnt)
	}
	for _, d := range []*mountProc{d1, d2} {
		select {
		case <-d.exited:
			t.Fatalf("a daemon exited: %v\n%s", d.waitErr, d.out)
		default:
		}
	}
	t.Logf("leader %s killed at %v after %d increments; %d increments in %v; etcd revision +%d after the kill",
		leader.URL, killedAt.Round(time.Millisecond), doneAtKill, oks, took.Round(time.Millisecond), after-before)
	t.Logf("h1's warnings:\n%s\nh2's warnings:\n%s", warnings(d1.out.String()), warnings(d2.out.String()))
}
