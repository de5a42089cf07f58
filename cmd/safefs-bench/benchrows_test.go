package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/safefs/safefs/testfs"
)

// TestCheckCount: a short count is "lost N" in its cell; a long one or
// one that is not a number is another error.
func TestCheckCount(t *testing.T) {
	p := filepath.Join(t.TempDir(), "count")
	require.NoError(t, os.WriteFile(p, []byte("5\n"), 0o644))
	assert.NoError(t, checkCount(p, 5))
	err := checkCount(p, 8)
	assert.Equal(t, lostError{3}, err)
	assert.Equal(t, "error: lost 3", errCell(err))
	err = checkCount(p, 4)
	assert.Error(t, err)
	assert.Equal(t, "error", errCell(err))
	require.NoError(t, os.WriteFile(p, []byte("x\n"), 0o644))
	assert.Error(t, checkCount(p, 5))
}

// TestFlockRunLost runs the real Perl counters on a plain directory: from
// 0 the count is exact; from -3 the run ends 3 short and says so.
func TestFlockRunLost(t *testing.T) {
	requirePerl(t)
	for _, byHand := range []bool{false, true} {
		dir := t.TempDir()
		e := &env{ctx: context.Background(), dir: dir, raw: dir, byHand: byHand,
			cfg: config{flockProcs: 4, flockRuns: 10}}
		require.NoError(t, counterSetup(e))
		n, err := flockRun(e)
		require.NoError(t, err, "by hand %v", byHand)
		assert.Equal(t, 40.0, n)
		require.NoError(t, os.WriteFile(e.path("count"), []byte("-3\n"), 0o644))
		_, err = flockRun(e)
		assert.Equal(t, lostError{3}, err, "by hand %v", byHand)
	}
}

// TestShare: the writers' shares add up to n and differ by at most one.
func TestShare(t *testing.T) {
	for _, n := range []int{1, 15, 16, 17, 2000} {
		for _, k := range []int{1, 4, 16} {
			sum, lo, hi := 0, n, 0
			for i := range k {
				s := share(n, k, i)
				sum, lo, hi = sum+s, min(lo, s), max(hi, s)
			}
			assert.Equal(t, n, sum, "n %d k %d", n, k)
			assert.LessOrEqual(t, hi-lo, 1, "n %d k %d", n, k)
		}
	}
}

// TestCommitCostRows runs the flock-counter, writers and memory rows on real mounts with small
// sizes: the flock counter (exact, else the cell is an error) and the
// writers rows are rates with all three ratios on every target; memory
// has a cell on the safefs targets only, with a plausible RSS.
func TestCommitCostRows(t *testing.T) {
	testfs.Available(t)
	requirePerl(t)
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	err := run([]string{"-dir", dir, "-markdown", "-targets", "backing,byhand,loopback,byhand-loopback,safefs,safefs-none",
		"-workloads", "flock-counter,writers-1,writers-4,writers-16,memory",
		"-flock-runs", "5", "-writers-n", "40", "-memory-files", "30", "-memory-size", "4M"}, &out, &errOut)
	t.Logf("table:\n%s\nstderr:\n%s", out.String(), errOut.String())
	require.NoError(t, err)
	assert.Empty(t, errOut.String())
	rows := markdownRows(t, out.String())
	targets := []string{"backing", "byhand", "loopback", "byhand-loopback", "safefs", "safefs-none"}
	require.Equal(t, targets, rows["workload"])
	rate := regexp.MustCompile(`^[0-9.]+ commits/s \([0-9.e-]+x, [0-9.e-]+x, by hand [0-9.e-]+x\)$`)
	for _, name := range []string{"flock-counter", "writers-1", "writers-4", "writers-16"} {
		require.Len(t, rows[name], len(targets), name)
		for i, c := range rows[name] {
			assert.Regexp(t, rate, c, "%s on %s", name, targets[i])
		}
	}
	mem := rows["memory"]
	require.Len(t, mem, len(targets))
	assert.Equal(t, []string{"-", "-", "-", "-"}, mem[:4])
	cellRE := regexp.MustCompile(`^([0-9.]+) MiB after mount, [+-][0-9.]+ after 30 files, [+-][0-9.]+ after 4 MiB \(peak [+-][0-9.]+; after GC [+-][0-9.]+, after drop_caches and GC [+-][0-9.]+\)$`)
	for i, c := range mem[4:] {
		m := cellRE.FindStringSubmatch(c)
		require.NotNil(t, m, "memory on %s: %q", targets[4+i], c)
		rss, _ := strconv.ParseFloat(m[1], 64)
		assert.Greater(t, rss, 1.0, "a daemon's RSS in MiB")
	}
	assertNoMount(t, dir)
}

// TestIssue12Syscalls: with -syscalls the writers and flock rows report
// fsyncs per commit: 2 by hand (file and directory, in the Perl processes
// too), some with full, and with durability=none well under one (not
// always none: a few whole-file saves outside the commits, such as
// rmw's learned state, fsync in any mode).
func TestIssue12Syscalls(t *testing.T) {
	testfs.Available(t)
	requireStrace(t)
	requirePerl(t)
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	err := run([]string{"-dir", dir, "-markdown", "-syscalls", "-targets", "byhand,safefs,safefs-none",
		"-workloads", "writers-1,writers-16,flock-counter", "-writers-n", "32", "-flock-procs", "2", "-flock-runs", "5"}, &out, &errOut)
	t.Logf("output:\n%s\nstderr:\n%s", out.String(), errOut.String())
	require.NoError(t, err)
	rows := markdownRows(t, out.String())
	fsyncs := regexp.MustCompile(`^[0-9.]+ calls, ([0-9.]+) fsyncs$`)
	for _, name := range []string{"writers-1", "writers-16", "flock-counter"} {
		// The count row is printed after the rate row of the same name.
		cells := rows[name]
		require.Len(t, cells, 3, name)
		got := make([]string, 3)
		for i, c := range cells {
			m := fsyncs.FindStringSubmatch(c)
			require.NotNil(t, m, "%s: %q", name, c)
			got[i] = m[1]
		}
		assert.Equal(t, "2.0", got[0], "%s by hand", name)
		full, _ := strconv.ParseFloat(got[1], 64)
		none, _ := strconv.ParseFloat(got[2], 64)
		assert.GreaterOrEqual(t, full, 1.0, "%s with durability=full", name)
		assert.Less(t, none, 0.5, "%s with durability=none", name)
	}
	assertNoMount(t, dir)
}

// TestFUSETrace: with -fusetrace the commit rows of the FUSE targets
// report the requests a commit sends, from the kernel's tracepoints: a
// rewrite through safefs opens, writes and flushes once per commit, and
// a target that is not a mount has no column.
func TestFUSETrace(t *testing.T) {
	testfs.Available(t)
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("tracefs needs root, and CI is set")
		}
		t.Skip("tracefs needs root")
	}
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	err := run([]string{"-dir", dir, "-markdown", "-fusetrace", "-targets", "backing,safefs-none",
		"-workloads", "rewrite-4k", "-rewrite-n", "50"}, &out, &errOut)
	t.Logf("output:\n%s\nstderr:\n%s", out.String(), errOut.String())
	require.NoError(t, err)
	rows := markdownRows(t, out.String())
	require.Contains(t, rows, "per commit (FUSE tracepoints)")
	assert.Equal(t, []string{"safefs-none"}, rows["per commit (FUSE tracepoints)"])
	cells := rows["rewrite-4k"]
	require.Len(t, cells, 1)
	m := regexp.MustCompile(`^([0-9.]+) requests$`).FindStringSubmatch(cells[0])
	require.NotNil(t, m, "%q", cells[0])
	n, _ := strconv.ParseFloat(m[1], 64)
	assert.GreaterOrEqual(t, n, 4.0, "requests per rewrite")
	for _, kind := range []string{"OPEN 1.00 x", "WRITE 1.00 x", "FLUSH 1.00 x"} {
		assert.Contains(t, out.String(), kind)
	}
	assertNoMount(t, dir)
}

// TestSQLiteBench runs the sqlite-wal workload briefly on the backing
// target and on safefs: a rate, every transaction counted.
func TestSQLiteBench(t *testing.T) {
	if _, err := os.Stat(python); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%v (.ci/run installs python3)", err)
		}
		t.Skip(err)
	}
	testfs.Available(t)
	var out, errOut bytes.Buffer
	err := run([]string{"-dir", t.TempDir(), "-markdown", "-targets", "backing,safefs", "-workloads", "sqlite-wal", "-sqlite-runs", "20"}, &out, &errOut)
	t.Logf("table:\n%s\nstderr:\n%s", out.String(), errOut.String())
	require.NoError(t, err)
	rows := markdownRows(t, out.String())
	require.Len(t, rows["sqlite-wal"], 2)
	assert.Regexp(t, `^[0-9.]+ tx/s \(1\.00x, \?\)$`, rows["sqlite-wal"][0])
	assert.Regexp(t, `^[0-9.]+ tx/s \([0-9.]+x, \?\)$`, rows["sqlite-wal"][1])
}
