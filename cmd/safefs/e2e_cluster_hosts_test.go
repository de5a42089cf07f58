package main

// Two daemons of one cluster over one BACKING, as two hosts, 8 Perl
// processes on each, every process reading and writing through its own
// host's mount: the counters of CGI scripts keep every increment, and a
// host that lost its lease while one of its processes held a script
// lock never lands that process's write silently.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/safefs/safefs/testfs"
)

// hostProcs processes per host, hostRuns increments each: 25 by
// default, as many as SAFEFS_TEST_HOST_RUNS says (100 for the full
// size: 1,600 increments per counter, about 4 times as long).
const hostProcs = 8

var hostRuns = envInt("SAFEFS_TEST_HOST_RUNS", 25)

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// twoHosts starts an etcd and two nodes (h1, h2) of one cluster over a
// new BACKING, with the -o options more; it returns BACKING and the
// mount points. Their lease is 10 s: a loaded machine that stalls a
// daemon past a 2 s lease has its writes refused (ESTALE), right but not
// what the workloads test.
func twoHosts(t *testing.T, more ...string) (string, []string) {
	t.Helper()
	backing, mnts, _ := twoDaemons(t, append([]string{"lease_ttl=10s"}, more...)...)
	return backing, mnts
}

// twoDaemons is twoHosts that returns the daemons too.
func twoDaemons(t *testing.T, more ...string) (string, []string, []*mountProc) {
	t.Helper()
	clusterPrereqs(t)
	e := startEtcd(t)
	backing := tempDir(t)
	var mnts []string
	var ds []*mountProc
	for _, node := range []string{"h1", "h2"} {
		mnt := nodeMnt(t, node)
		ds = append(ds, startNodeWith(t, e, backing, mnt, node, more, nil))
		mnts = append(mnts, mnt)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, d := range ds {
				t.Logf("h%d's warnings and errors:\n%s", i+1, warnings(d.out.String()))
			}
		}
	})
	return backing, mnts, ds
}

// warnings are the first 40 WARN, ERROR and rmw lines of a daemon's log.
func warnings(log string) string {
	var out []string
	for line := range strings.Lines(log) {
		if (strings.Contains(line, "\tWARN\t") || strings.Contains(line, "\tERROR\t") || strings.Contains(line, "rmw")) && len(out) < 40 {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}

// onHosts runs hostProcs processes per mount at once, each `perl args`
// with every "MNT" in args made its host's mount point, and returns
// their outputs (host by host). A process that fails fails the test.
func onHosts(t *testing.T, mnts []string, args ...string) []string {
	t.Helper()
	outs := make([]string, hostProcs*len(mnts))
	var wg sync.WaitGroup
	for i := range outs {
		mnt := mnts[i/hostProcs]
		var a []string
		for _, s := range args {
			a = append(a, strings.ReplaceAll(s, "MNT", mnt))
		}
		wg.Go(func() { outs[i] = runPerlFile(t, a) })
	}
	wg.Wait()
	return outs
}

// runPerlFile runs `perl args` to its end; a failure or a hang (the
// limit guards against a hang only) is an error of the test.
func runPerlFile(t *testing.T, args []string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "perl", args...).CombinedOutput()
	if err != nil {
		t.Errorf("perl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// requireNoAnomalies: every output is only its "DONE" line.
func requireNoAnomalies(t *testing.T, outs []string) {
	t.Helper()
	var bad []string
	for i, out := range outs {
		for line := range strings.Lines(out) {
			if !strings.HasPrefix(line, "DONE") && len(bad) < 20 {
				bad = append(bad, fmt.Sprintf("proc %d: %s", i, strings.TrimSpace(line)))
			}
		}
	}
	require.Empty(t, bad, "anomalies (empty, torn or stale reads)")
}

// readCount parses a counter file.
func readCount(t *testing.T, file string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	m := regexp.MustCompile(`\A(\d+)\n\z`).FindSubmatch(b)
	require.NotNil(t, m, "counter file is %q", b)
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// cpuHog keeps n busy loops running until the test ends: the daemons'
// replies and etcd's then come late, and the processes interleave in
// other ways.
func cpuHog(t *testing.T, n int) {
	t.Helper()
	for range n {
		cmd := exec.Command("perl", "-e", "1 while 1")
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
}

// The careful counter (open +<, lock, read, seek, print, truncate,
// close), with flock and with fcntl, locking the data file itself or a
// separate lock file, with and without a CPU hog: exact.
func TestClusterHostsCarefulCounter(t *testing.T) {
	for _, hog := range []bool{false, true} {
		for _, lock := range []string{"flock", "fcntl"} {
			for _, how := range []string{"data", "lockfile"} {
				name := lock + "-" + how
				if hog {
					name += "-hog"
				}
				t.Run(name, func(t *testing.T) { hostsCounter(t, lock, how, hog) })
			}
		}
	}
}

func hostsCounter(t *testing.T, lock, how string, hog bool) {
	backing, mnts := twoHosts(t)
	require.NoError(t, os.WriteFile(filepath.Join(backing, "count"), []byte("0\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(backing, "count.lock"), nil, 0o644))
	if hog {
		cpuHog(t, 2)
	}
	outs := onHosts(t, mnts, testdataPath(t, "careful_counter.pl"), lock, how,
		"MNT/count", strconv.Itoa(hostRuns), "MNT/count.lock")
	requireNoAnomalies(t, outs)
	for _, mnt := range append(mnts, backing) {
		assert.Equal(t, len(outs)*hostRuns, readCount(t, filepath.Join(mnt, "count")), "increments kept, as %s shows them", mnt)
	}
}

// The naive counter (no lock: open <, read, close, open >, print,
// close) in read-modify-write sessions (rmw=GLOB) across hosts: exact.
func TestClusterHostsNaiveCounterSessions(t *testing.T) {
	for _, hog := range []bool{false, true} {
		t.Run(map[bool]string{false: "quiet", true: "hog"}[hog], func(t *testing.T) { naiveSessions(t, hog) })
	}
}

func naiveSessions(t *testing.T, hog bool) {
	backing, mnts := twoHosts(t, "rmw=count", "rmw_wait=60s")
	require.NoError(t, os.WriteFile(filepath.Join(backing, "count"), []byte("0\n"), 0o644))
	if hog {
		cpuHog(t, 2)
	}
	outs := onHosts(t, mnts, testfs.PerlScript("naive_counter.pl"), "MNT/count", strconv.Itoa(hostRuns))
	requireNoAnomalies(t, outs)
	for _, mnt := range append(mnts, backing) {
		assert.Equal(t, len(outs)*hostRuns, readCount(t, filepath.Join(mnt, "count")), "increments kept, as %s shows them", mnt)
	}
}

// A DBM hit counter (tie, increment, untie under flock, of a lock file
// or of the database file itself) from both hosts: exact, and each
// process's own key holds its count.
func TestClusterHostsDBM(t *testing.T) {
	for _, module := range []string{"GDBM_File", "DB_File"} {
		for _, lock := range []string{"lockfile", "db"} {
			t.Run(module+"-"+lock, func(t *testing.T) { hostsDBM(t, module, lock) })
		}
	}
}

func hostsDBM(t *testing.T, module, lock string) {
	_, mnts := twoHosts(t)
	runs := max(hostRuns/4, 10)
	outs := onHosts(t, mnts, testfs.PerlScript("dbm_counter.pl"), module, "MNT/hits", strconv.Itoa(runs), lock)
	requireNoAnomalies(t, outs)
	for _, mnt := range mnts {
		keys := map[string]string{}
		for line := range strings.Lines(perlOut(t, testfs.PerlScript("dbm_dump.pl"), module, filepath.Join(mnt, "hits"))) {
			k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
			keys[k] = v
		}
		assert.Equal(t, strconv.Itoa(len(outs)*runs), keys["hits"], "hits, as %s shows them", mnt)
		assert.Len(t, keys, len(outs)+1, "hits and one key per process, as %s shows them", mnt)
		for k, v := range keys {
			if k != "hits" {
				assert.Equal(t, strconv.Itoa(runs), v, "process key %s, as %s shows it", k, mnt)
			}
		}
	}
}

// perlOut runs `perl args`; it must exit 0.
func perlOut(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("perl", args...).CombinedOutput()
	require.NoError(t, err, "perl %s: %s", strings.Join(args, " "), out)
	return string(out)
}

// A host stopped (SIGSTOP) past lease_ttl while one of its processes
// holds a script lock and is in the middle of the careful counter: the
// other host takes the lock once the lease is gone and increments; the
// stopped host's write, made before the stop or after it, never lands:
// its close fails with ESTALE and its bytes are in rejected/.
func TestClusterHostsLeaseLostUnderScriptLock(t *testing.T) {
	for _, c := range []struct{ lock, how, write string }{
		{"flock", "data", "before"},
		{"fcntl", "data", "after"},
		{"flock", "lockfile", "after"},
		{"fcntl", "lockfile", "before"},
	} {
		t.Run(c.lock+"-"+c.how+"-write-"+c.write, func(t *testing.T) { leaseLostUnderLock(t, c.lock, c.how, c.write) })
	}
}

// stalledCounter is one careful increment (see careful_counter.pl) that
// prints "read N" once it holds its lock and has read (and written, if
// WRITE is before), then waits for the file GO (and writes, if WRITE is
// after); it prints
// "close ok" or "close err ERRNO".
const stalledCounter = `my ($how, $lock, $file, $lockfile, $write, $go) = @ARGV;
	my $l;
	if ($lock eq 'lockfile') { open($l, '+<', $lockfile) or die "open: $!"; lockit($l, $how) or die "lock: $!" }
	open(my $d, '+<', $file) or die "open: $!";
	if ($lock eq 'data') { lockit($d, $how) or die "lock: $!" }
	my $v = <$d>;
	my $rewrite = sub { sysseek($d, 0, 0); syswrite($d, ($v + 1) . "\n") or die "write: $!"; truncate($d, length(($v + 1) . "\n")) or die "truncate: $!" };
	$rewrite->() if $write eq 'before';
	print "read ", $v + 0, "\n";
	select(undef, undef, undef, 0.05) until -e $go;
	$rewrite->() if $write eq 'after';
	if (close($d)) { print "close ok\n" } else { print "close err ", $!+0, "\n" }`

func leaseLostUnderLock(t *testing.T, lock, how, write string) {
	backing, mnts, ds := twoDaemons(t)
	require.NoError(t, os.WriteFile(filepath.Join(backing, "count"), []byte("41\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(backing, "count.lock"), nil, 0o644))
	goFile := filepath.Join(tempDir(t), "go")
	p := lockPerl(t, stalledCounter, lock, how, filepath.Join(mnts[0], "count"), filepath.Join(mnts[0], "count.lock"), write, goFile)
	waitOut(t, p, "read 41") // with write=before, written too: syswrite waits for the daemon
	stopPastLease(t, ds[0], func() {
		// h2's process waits for the lock until h1's lease has expired.
		out := perlOut(t, testdataPath(t, "careful_counter.pl"), lock, how,
			filepath.Join(mnts[1], "count"), "1", filepath.Join(mnts[1], "count.lock"))
		require.Equal(t, "DONE n=1 last=42\n", out)
	})
	if write == "after" {
		// The commit's lock is then under the new lease: refused because
		// the script lock was granted under the old one. Before: under
		// the old lease, which etcd no longer has.
		waitLine(t, ds[0].proc, "etcd lease renewed")
	}
	require.NoError(t, os.WriteFile(goFile, nil, 0o644))
	waitOut(t, p, fmt.Sprintf("close err %d", syscall.ESTALE))
	for _, mnt := range append(mnts, backing) {
		assert.Equal(t, 42, readCount(t, filepath.Join(mnt, "count")), "as %s shows it", mnt)
	}
	requireRejected(t, backing, "h1", "42\n")
}

// The naive counter in a read-modify-write session (rmw=GLOB) on a host
// stopped past lease_ttl between its read and its write: the other host
// takes the session's cluster lock once the lease is gone and
// increments; the stopped host's write, once its daemon has a new
// lease, never lands: its close fails with ESTALE and its bytes are in
// rejected/. rmw_hold is long: the session is not ended by its hold.
func TestClusterHostsLeaseLostInSession(t *testing.T) {
	backing, mnts, ds := twoDaemons(t, "rmw=count", "rmw_hold=60s", "rmw_wait=60s")
	require.NoError(t, os.WriteFile(filepath.Join(backing, "count"), []byte("41\n"), 0o644))
	goFile := filepath.Join(tempDir(t), "go")
	p := lockPerl(t, `my ($file, $go) = @ARGV;
		open(my $r, '<', $file) or die "open: $!"; my $v = <$r>; close($r);
		print "read ", $v + 0, "\n";
		select(undef, undef, undef, 0.05) until -e $go;
		open(my $w, '>', $file) or die "open >: $!"; print $w $v + 1, "\n";
		if (close($w)) { print "close ok\n" } else { print "close err ", $!+0, "\n" }`,
		filepath.Join(mnts[0], "count"), goFile)
	waitOut(t, p, "read 41")
	stopPastLease(t, ds[0], func() {
		// h2's open waits for the session's cluster lock until h1's lease has expired.
		out := perlOut(t, testfs.PerlScript("naive_counter.pl"), filepath.Join(mnts[1], "count"), "1")
		require.Equal(t, "DONE reads=1 max=41\n", out)
	})
	waitLine(t, ds[0].proc, "etcd lease renewed") // the commit's lock is then under the new lease
	require.NoError(t, os.WriteFile(goFile, nil, 0o644))
	waitOut(t, p, fmt.Sprintf("close err %d", syscall.ESTALE))
	// Read in BACKING: a read through a mount takes a session, held
	// rmw_hold after it.
	assert.Equal(t, 42, readCount(t, filepath.Join(backing, "count")))
	requireRejected(t, backing, "h1", "42\n")
}

// stopPastLease stops daemon d (SIGSTOP), runs during, then lets d go
// on (SIGCONT; also at the test's end, if during fails).
func stopPastLease(t *testing.T, d *mountProc, during func()) {
	t.Helper()
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGSTOP))
	stopped := true
	cont := func() {
		if stopped {
			stopped = false
			require.NoError(t, d.cmd.Process.Signal(syscall.SIGCONT))
		}
	}
	t.Cleanup(cont)
	during()
	cont()
}

// requireRejected: node's rejected/ holds one file, with want.
func requireRejected(t *testing.T, backing, node, want string) {
	t.Helper()
	kept := rejectedFiles(t, backing, node)
	require.Len(t, kept, 1, "%s's write kept in rejected/", node)
	b, err := os.ReadFile(filepath.Join(backing, ".safefs", "nodes", node, "rejected", kept[0]))
	require.NoError(t, err)
	require.Equal(t, want, string(b))
}
