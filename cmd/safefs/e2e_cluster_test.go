package main

// Several safefs daemons serving one BACKING through one etcd
// (cluster=etcd): what issue 13 says must hold, with real daemons, a
// real etcd and real Perl processes.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/safefs/safefs/fs"
)

func clusterPrereqs(t *testing.T) {
	t.Helper()
	requireFuse(t)
	requireRoot(t)
	requireTool(t, "perl")
}

// appender appends n whole lines tagged tag to file, one open-append-
// close each, and prints "ok" or the failed step with its errno.
const appender = `
my ($file, $tag, $n) = @ARGV;
for my $i (1..$n) {
    open(my $f, '>>', $file) or do { print "open $!\n"; exit 0 };
    syswrite($f, sprintf("%s-%04d-%s\n", $tag, $i, 'x' x 60));
    close($f) or do { print "close ", $!+0, "\n"; exit 0 };
}
print "ok\n";`

// Appenders spread over three mounts of one BACKING: every line is
// there, exactly once, whole.
func TestClusterAppendersExact(t *testing.T) {
	clusterPrereqs(t)
	e := startEtcd(t)
	backing := tempDir(t)
	var mnts []string
	for _, node := range []string{"n1", "n2", "n3"} {
		_, mnt := startNode(t, e, backing, node)
		mnts = append(mnts, mnt)
	}
	appendExact(t, backing, mnts, 3, 40)
}

// appendExact runs perMount appenders through each mount on one file,
// lines each, and checks that BACKING has each of their lines exactly
// once, whole.
func appendExact(t *testing.T, backing string, mnts []string, perMount, lines int) {
	t.Helper()
	var wg sync.WaitGroup
	outs := make([]string, len(mnts)*perMount)
	var want []string
	for i := range outs {
		tag := fmt.Sprintf("p%02d", i)
		for j := 1; j <= lines; j++ {
			want = append(want, fmt.Sprintf("%s-%04d-%s", tag, j, strings.Repeat("x", 60)))
		}
		wg.Go(func() { outs[i] = perl(t, appender, filepath.Join(mnts[i%len(mnts)], "log"), tag, fmt.Sprint(lines)) })
	}
	wg.Wait()
	for i, o := range outs {
		require.Equal(t, "ok\n", o, "appender %d", i)
	}
	data, err := os.ReadFile(filepath.Join(backing, "log"))
	require.NoError(t, err)
	got := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	require.Len(t, got, len(want), "lines in the log")
	slices.Sort(got)
	slices.Sort(want)
	require.Equal(t, want, got)
}

// rewriter replaces file n times with a whole version: 32 KiB of one
// letter; reader reads it n times and reports any read that is not one
// whole version.
const (
	rewriter = `
my ($file, $c, $n) = @ARGV;
for my $i (1..$n) {
    open(my $f, '>', $file) or do { print "open $!\n"; exit 0 };
    for (1..8) { syswrite($f, $c x 4096) }
    close($f) or do { print "close ", $!+0, "\n"; exit 0 };
}
print "ok\n";`
	reader = `
my ($file, $n) = @ARGV;
for my $i (1..$n) {
    open(my $f, '<', $file) or do { print "open $!\n"; exit 0 };
    my $d = do { local $/; <$f> };
    close($f);
    if ($d !~ /^(.)\1{32767}\z/s) { printf "torn %d bytes\n", length($d); exit 0 }
}
print "ok\n";`
)

// Rewrites of one file from two mounts, read from both: every close
// succeeds (a commit of the other daemon is not "changed outside the
// mount") and every read is one whole version.
func TestClusterRewritesWhole(t *testing.T) {
	clusterPrereqs(t)
	e := startEtcd(t)
	backing := tempDir(t)
	_, m1 := startNode(t, e, backing, "n1")
	_, m2 := startNode(t, e, backing, "n2")
	require.NoError(t, os.WriteFile(filepath.Join(backing, "doc"), []byte(strings.Repeat("0", 32768)), 0o644))
	var wg sync.WaitGroup
	outs := make([]string, 8)
	for i := range 4 {
		mnt := []string{m1, m2}[i%2]
		wg.Go(func() { outs[i] = perl(t, rewriter, filepath.Join(mnt, "doc"), string(rune('a'+i)), "30") })
		wg.Go(func() { outs[4+i] = perl(t, reader, filepath.Join(mnt, "doc"), "60") })
	}
	wg.Wait()
	for i, o := range outs {
		require.Equal(t, "ok\n", o, "process %d", i)
	}
}

// A commit through one mount is what the next open through the other
// reads, every time (attributes are not cached in cluster mode).
func TestClusterOpenAfterCommitElsewhere(t *testing.T) {
	clusterPrereqs(t)
	e := startEtcd(t)
	backing := tempDir(t)
	_, m1 := startNode(t, e, backing, "n1")
	_, m2 := startNode(t, e, backing, "n2")
	mnts := []string{m1, m2}
	for i := range 40 {
		v := []byte(fmt.Sprintf("version %d%s", i, strings.Repeat(".", i)))
		require.NoError(t, os.WriteFile(filepath.Join(mnts[i%2], "counter"), v, 0o644), "write %d", i)
		got, err := os.ReadFile(filepath.Join(mnts[(i+1)%2], "counter"))
		require.NoError(t, err)
		require.Equal(t, string(v), string(got), "read %d through the other mount", i)
	}
}

// The mixes one BACKING refuses, each with exit 6, and a cluster mount
// with etcd down, exit 13. Nothing is mounted by any of them.
func TestClusterRefusals(t *testing.T) {
	clusterPrereqs(t)
	e := startEtcd(t)
	backing := tempDir(t)
	startNode(t, e, backing, "n1")
	mnt := tempDir(t)
	cases := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"not clustered", []string{"mount", backing, mnt}, exitBusy, "already served"},
		{"other cluster", []string{"mount", "-o", strings.Replace(clusterOpts(e, "n2"), "cluster_name=test", "cluster_name=other", 1), backing, mnt},
			exitBusy, `served by cluster "test"`},
		{"same node", []string{"mount", "-o", clusterOpts(e, "n1"), backing, mnt}, exitBusy, `node "n1" already runs`},
		{"etcd down", []string{"mount", "-o", "cluster=etcd,etcd=http://127.0.0.1:1,node=n3", backing, mnt}, exitCluster, "cannot be reached"},
		{"etcd without cluster", []string{"mount", "-o", "etcd=" + e.URL, backing, mnt}, exitUsage, "needs cluster=etcd"},
	}
	for _, c := range cases {
		r := runSafefs(t, nil, c.args...)
		require.Equal(t, c.code, r.code, "%s: %s", c.name, r.stderr)
		require.Contains(t, r.stderr, c.msg, c.name)
		_, mounted := mountType(t, mnt)
		require.False(t, mounted, c.name)
	}
	// A cluster serving BACKING is also refused to a plain daemon that
	// comes first: the reverse order.
	plain := tempDir(t)
	startMount(t, plain, tempDir(t))
	r := runSafefs(t, nil, "mount", "-o", clusterOpts(e, "n9"), plain, mnt)
	require.Equal(t, exitBusy, r.code, r.stderr)
	require.Contains(t, r.stderr, "not in a cluster")
}

// commitLine runs commit.pl on file with data and returns its output
// lines, without requiring success.
func commitLines(t *testing.T, mode, file string, data []byte) string {
	t.Helper()
	return commitPerl(t, mode, file, data, "").wait(t)
}

// rejectedFiles lists node's rejected/ in BACKING.
func rejectedFiles(t *testing.T, backing, node string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(backing, ".safefs", "nodes", node, "rejected"))
	require.NoError(t, err)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

const stopEnv = "SAFEFS_STOP_AT"

// A daemon SIGSTOPped mid-commit past its lease, then SIGCONTed: its
// commit does not publish over what another daemon committed meanwhile,
// whether it was stopped before its fence (the lease is gone) or right
// after it (the fence's answer is too old to rely on).
func TestClusterStoppedPastTTLDoesNotPublish(t *testing.T) {
	for _, point := range []string{"replace-before-rename", "replace-fenced"} {
		t.Run(point, func(t *testing.T) { stoppedPastTTL(t, point) })
	}
}

func stoppedPastTTL(t *testing.T, point string) {
	clusterPrereqs(t)
	e := startEtcd(t)
	backing := tempDir(t)
	p1, m1 := startNode(t, e, backing, "n1", stopEnv+"="+point)
	p2, m2 := startNode(t, e, backing, "n2")
	t.Cleanup(func() {
		if t.Failed() {
			doc, _ := os.ReadFile(filepath.Join(backing, "doc"))
			kept, _ := os.ReadDir(filepath.Join(backing, ".safefs", "nodes", "n1", "rejected"))
			t.Logf("doc now starts %.20q; n1's rejected/ holds %d; n1's log:\n%s\nn2's log:\n%s",
				doc, len(kept), p1.out, p2.out)
		}
	})
	require.NoError(t, os.WriteFile(filepath.Join(backing, "doc"), []byte("old\n"), 0o644))
	stale := []byte(strings.Repeat("stale ", 1000))
	w1 := commitPerl(t, "replace", filepath.Join(m1, "doc"), stale, "")
	waitLine(t, p1.proc, "stop point reached")
	// n2 gets the lock only once n1's lease has expired.
	commitOK(t, "replace", filepath.Join(m2, "doc"), []byte("fresh\n"))
	require.NoError(t, p1.cmd.Process.Signal(syscall.SIGCONT))
	out1 := w1.wait(t)
	requireCloseErr(t, out1, syscall.ESTALE)
	got, err := os.ReadFile(filepath.Join(backing, "doc"))
	require.NoError(t, err)
	require.Equal(t, "fresh\n", string(got))
	kept := rejectedFiles(t, backing, "n1")
	require.Len(t, kept, 1)
	b, err := os.ReadFile(filepath.Join(backing, ".safefs", "nodes", "n1", "rejected", kept[0]))
	require.NoError(t, err)
	require.Equal(t, stale, b)
	require.Contains(t, p1.out.String(), "lease lost before publishing")
}

// A daemon killed (SIGKILL) while it holds a file's commit lock: the
// other daemon commits the file once the lease expires, and the killed
// node's journal is settled at its restart, under the cluster lock.
func TestClusterKilledHolder(t *testing.T) {
	clusterPrereqs(t)
	e := startEtcd(t)
	backing := tempDir(t)
	p1, m1 := startNode(t, e, backing, "n1", stopEnv+"=replace-before-rename")
	_, m2 := startNode(t, e, backing, "n2")
	require.NoError(t, os.WriteFile(filepath.Join(backing, "doc"), []byte("old\n"), 0o644))
	w1 := commitPerl(t, "replace", filepath.Join(m1, "doc"), []byte("lost\n"), "")
	waitLine(t, p1.proc, "stop point reached")
	require.NoError(t, p1.cmd.Process.Kill())
	waitKilled(t, p1)
	detach(t, m1)
	w1.wait(t) // its close fails: the daemon is gone
	commitOK(t, "replace", filepath.Join(m2, "doc"), []byte("after\n"))
	staging := filepath.Join(backing, ".safefs", "nodes", "n1", "staging")
	left, err := os.ReadDir(staging)
	require.NoError(t, err)
	require.Len(t, left, 1, "the killed commit's staging file")
	p1 = startNodeAt(t, e, backing, m1, "n1")
	require.Contains(t, p1.out.String(), `"records": 1`)
	left, err = os.ReadDir(staging)
	require.NoError(t, err)
	require.Empty(t, left)
	got, err := os.ReadFile(filepath.Join(m1, "doc"))
	require.NoError(t, err)
	require.Equal(t, "after\n", string(got))
	commitOK(t, "append", filepath.Join(m1, "doc"), []byte("more\n"))
	got, err = os.ReadFile(filepath.Join(m2, "doc"))
	require.NoError(t, err)
	require.Equal(t, "after\nmore\n", string(got))
}

// requireCloseErr: commit.pl's output says open and write succeeded
// and close failed with errno.
func requireCloseErr(t *testing.T, out string, errno syscall.Errno) {
	t.Helper()
	require.Regexp(t, fmt.Sprintf(`^open ok\nwrite ok\nclose err %d [^\n]*\n$`, errno), out)
}

// steadyAppender appends tagged lines until told to stop by the file
// STOP appearing, or after 3 failed closes; it prints "ok TAG-I" or
// "err ERRNO TAG-I" per line.
const steadyAppender = `
my ($file, $tag, $stop) = @ARGV;
$| = 1;
my $errs = 0;
for (my $i = 1; !-e $stop && $errs < 3; $i++) {
    my $line = sprintf("%s-%05d", $tag, $i);
    open(my $f, '>>', $file) or do { print "err open $!\n"; exit 0 };
    syswrite($f, "$line\n");
    if (close($f)) { print "ok $line\n" } else { printf "err %d %s\n", $!+0, $line; $errs++ }
}`

// etcd killed during a workload of appenders on two mounts: no line is
// torn, every line whose close succeeded is in the file and no other
// (a failed one is in rejected/), the failures (after lock_timeout) are
// the documented errnos, reads go on; once etcd is back, commits
// succeed again.
func TestClusterEtcdDown(t *testing.T) {
	clusterPrereqs(t)
	e := startEtcd(t)
	backing := tempDir(t)
	// A request waits lock_timeout for etcd before ENOLCK: short here.
	var m1, m2 string
	for i, m := range []*string{&m1, &m2} {
		*m = nodeMnt(t, fmt.Sprintf("n%d", i+1))
		startNodeWith(t, e, backing, *m, fmt.Sprintf("n%d", i+1), []string{"lock_timeout=5s"}, nil)
	}
	stop := filepath.Join(tempDir(t), "STOP")
	var ps []*proc
	for i := range 4 {
		mnt := []string{m1, m2}[i%2]
		ps = append(ps, startProc(t, exec.Command("perl", "-e", steadyAppender, filepath.Join(mnt, "log"), fmt.Sprintf("p%d", i), stop)))
	}
	waitLine(t, ps[3], "ok p3-00010")
	e.Kill()
	got, err := os.ReadFile(filepath.Join(m2, "log"))
	require.NoError(t, err, "reads with etcd down")
	require.NotEmpty(t, got)
	require.NoError(t, os.WriteFile(stop, nil, 0o600)) // those still committing stop
	okLines, failed := map[string]bool{}, 0
	for _, p := range ps {
		for _, l := range strings.Split(strings.TrimSpace(p.wait(t)), "\n") {
			f := strings.Fields(l)
			require.Len(t, f, 3-btoi(f[0] == "ok"), "line %q", l)
			if f[0] == "ok" {
				okLines[f[1]] = true
				continue
			}
			failed++
			require.Contains(t, []string{fmt.Sprint(int(syscall.ENOLCK)), fmt.Sprint(int(syscall.ESTALE)), fmt.Sprint(int(syscall.ETIMEDOUT))}, f[1], "line %q", l)
		}
	}
	require.NotZero(t, failed, "no commit failed while etcd was down")
	data, err := os.ReadFile(filepath.Join(backing, "log"))
	require.NoError(t, err)
	inFile := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		require.Regexp(t, `^p\d-\d{5}$`, l, "a torn or mixed line")
		require.False(t, inFile[l], "line %q twice", l)
		inFile[l] = true
	}
	require.Equal(t, okLines, inFile, "lines committed = lines whose close succeeded")
	kept := len(rejectedFiles(t, backing, "n1")) + len(rejectedFiles(t, backing, "n2"))
	require.Equal(t, failed, kept, "every failed commit's bytes kept")
	out := commitLines(t, "append", filepath.Join(m1, "log"), []byte("down\n"))
	requireCloseErr(t, out, syscall.ENOLCK)
	e.Restart(t)
	for _, mnt := range []string{m1, m2} {
		appendWhenBack(t, filepath.Join(mnt, "log"), []byte("back\n"))
		commitOK(t, "replace", filepath.Join(mnt, "doc"), []byte(mnt))
	}
	data, err = os.ReadFile(filepath.Join(backing, "log"))
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(string(data), "\nback\nback\n"), "appends resume")
}

// appendWhenBack appends data to file once the daemon has reconnected
// to etcd: until then each try fails with ENOLCK (and is kept in
// rejected/, which the caller does not count any more).
func appendWhenBack(t *testing.T, file string, data []byte) {
	t.Helper()
	deadline := time.Now().Add(waitLimit) // guards against a hang only
	for {
		out := commitLines(t, "append", file, data)
		if out == "open ok\nwrite ok\nclose ok\n" {
			return
		}
		requireCloseErr(t, out, syscall.ENOLCK)
		require.True(t, time.Now().Before(deadline), "commits did not resume")
		time.Sleep(100 * time.Millisecond)
	}
}

// naive is the unlocked counter of a CGI script: read the number, write
// it back plus one, n times; it prints "ok" or the failed step.
const naive = `
my ($file, $n) = @ARGV;
for (1..$n) {
    open(my $r, '<', $file) or do { print "open < $!\n"; exit 0 };
    my $c = <$r>;
    close($r);
    open(my $w, '>', $file) or do { print "open > $!\n"; exit 0 };
    print $w $c + 1, "\n";
    close($w) or do { print "close ", $!+0, "\n"; exit 0 };
}
print "ok\n";`

// Read-modify-write sessions are cluster-wide: the naive counter, its
// processes spread over two daemons of one BACKING, keeps every
// increment when its file takes sessions (rmw=count).
func TestClusterNaiveCounterSessions(t *testing.T) {
	clusterPrereqs(t)
	e := startEtcd(t)
	backing := tempDir(t)
	require.NoError(t, os.WriteFile(filepath.Join(backing, "count"), []byte("0\n"), 0o644))
	var mnts []string
	for _, node := range []string{"n1", "n2"} {
		mnt := nodeMnt(t, node)
		startNodeWith(t, e, backing, mnt, node, []string{"rmw=count", "rmw_wait=20s"}, nil)
		mnts = append(mnts, mnt)
	}
	const procs, runs = 6, 30
	outs := make([]string, procs)
	var wg sync.WaitGroup
	for i := range outs {
		wg.Go(func() { outs[i] = perl(t, naive, filepath.Join(mnts[i%2], "count"), fmt.Sprint(runs)) })
	}
	wg.Wait()
	for i, o := range outs {
		require.Equal(t, "ok\n", o, "counter %d", i)
	}
	b, err := os.ReadFile(filepath.Join(backing, "count"))
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("%d\n", procs*runs), string(b), "increments kept across two daemons")
}

// safefs status finds a cluster node's socket (.safefs/nodes/NODE/):
// given a mount point, that mount's daemon; given BACKING served by two
// nodes of this host, it asks for the mount point and names both.
func TestClusterStatus(t *testing.T) {
	clusterPrereqs(t)
	e := startEtcd(t)
	backing := tempDir(t)
	var mnts []string
	for _, node := range []string{"n1", "n2"} {
		_, mnt := startNode(t, e, backing, node)
		mnts = append(mnts, mnt)
	}
	for i, mnt := range mnts {
		r := runSafefs(t, nil, "status", mnt, "--json")
		require.Equal(t, exitOK, r.code, "status %s: %s", mnt, r.stderr)
		var st fs.Status
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
		assert.Equal(t, fmt.Sprintf("n%d", i+1), st.Node, "status of %s", mnt)
		assert.Equal(t, mnt, st.Mountpoint)
	}
	r := runSafefs(t, nil, "status", backing)
	require.Equal(t, exitUsage, r.code, "status of BACKING served by two nodes: %s", r.stderr)
	for i, mnt := range mnts {
		assert.Contains(t, r.stderr, fmt.Sprintf("node n%d at %s", i+1, mnt))
	}
}

// A node killed in a commit, then no cluster daemon at all: `safefs
// recover BACKING` settles the node's journal (and so does a plain
// daemon's mount): the staging file goes, the file is whole.
func TestClusterRecoverNodesWithoutCluster(t *testing.T) {
	clusterPrereqs(t)
	e := startEtcd(t)
	backing := tempDir(t)
	require.NoError(t, os.WriteFile(filepath.Join(backing, "doc"), []byte("old\n"), 0o644))
	p1, m1 := startNode(t, e, backing, "n1", stopEnv+"=replace-before-rename")
	w1 := commitPerl(t, "replace", filepath.Join(m1, "doc"), []byte("lost\n"), "")
	waitLine(t, p1.proc, "stop point reached")
	require.NoError(t, p1.cmd.Process.Kill())
	waitKilled(t, p1)
	detach(t, m1)
	w1.wait(t)
	staging := filepath.Join(backing, ".safefs", "nodes", "n1", "staging")
	left, err := os.ReadDir(staging)
	require.NoError(t, err)
	require.Len(t, left, 1, "the killed commit's staging file")

	s := recoverBacking(t, backing)
	assert.Equal(t, 1, s.Records, "the node's record")
	assert.Equal(t, 1, s.RolledBack, "its replace, not renamed yet")
	left, err = os.ReadDir(staging)
	require.NoError(t, err)
	require.Empty(t, left)
	got, err := os.ReadFile(filepath.Join(backing, "doc"))
	require.NoError(t, err)
	require.Equal(t, "old\n", string(got))
	assert.Equal(t, 0, recoverBacking(t, backing).Records, "recovered twice")
}
