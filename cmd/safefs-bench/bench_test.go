package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/testfs"
)

// TestLoopbackOptions: the loopback target is go-fuse's example loopback
// as users run it, with 1 s attribute and entry timeouts (not 0).
func TestLoopbackOptions(t *testing.T) {
	o := loopbackOptions("/some/dir")
	require.NotNil(t, o.AttrTimeout)
	require.NotNil(t, o.EntryTimeout)
	assert.Equal(t, time.Second, *o.AttrTimeout)
	assert.Equal(t, time.Second, *o.EntryTimeout)
	assert.True(t, o.NullPermissions)
	assert.Equal(t, "loopback", o.MountOptions.Name)
	if os.Geteuid() == 0 { // -allow-other, which adds default_permissions
		assert.True(t, o.MountOptions.AllowOther)
		assert.Contains(t, o.MountOptions.Options, "default_permissions")
	}
}

// TestTargetsServedApart: each FUSE target is served by a daemon process
// of its own, as its users run it, and the mount serving other users
// lets the kernel check permissions (as the example's -allow-other does).
func TestTargetsServedApart(t *testing.T) {
	testfs.Available(t)
	log := zap.NewNop()
	for _, name := range []string{"loopback", "safefs"} {
		tg, err := newTarget(name, t.TempDir(), log)
		require.NoError(t, err, name)
		pid := tg.pid
		opts := mountOptions(t, tg.dir)
		require.NoError(t, tg.close(), name)
		assert.NotZero(t, pid, name)
		assert.NotEqual(t, os.Getpid(), pid, "%s served by the bench's own process", name)
		if os.Geteuid() == 0 {
			assert.Contains(t, opts, "default_permissions", name)
		}
	}
}

// mountOptions returns the options /proc/mounts shows for dir.
func mountOptions(t *testing.T, dir string) string {
	b, err := os.ReadFile("/proc/mounts")
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 3 && f[1] == dir {
			return f[3]
		}
	}
	t.Fatalf("%s is not in /proc/mounts", dir)
	return ""
}

// TestErrCell: an errno is named in the cell, other errors are "error".
func TestErrCell(t *testing.T) {
	assert.Equal(t, "error: ENODEV", errCell(fmt.Errorf("mmap x: %w", unix.ENODEV)))
	assert.Equal(t, "error", errCell(fmt.Errorf("x holds %q", "a")))
	assert.Equal(t, "torn", errCell(fmt.Errorf("x holds %q, not a count: %w", "8\n\n", errTorn)))
}

// TestUnsafeLoss: a torn naive counter is a result on the targets without
// safefs and a failure on safefs; a torn flock counter is a failure anywhere.
func TestUnsafeLoss(t *testing.T) {
	torn := fmt.Errorf("count holds %q, not a count: %w", "8\n\n", errTorn)
	naive, flock := workload{name: "naive-counter"}, workload{name: "flock-counter"}
	assert.True(t, unsafeLoss(naive, &target{name: "backing"}, torn))
	assert.True(t, unsafeLoss(naive, &target{name: "loopback"}, torn))
	assert.False(t, unsafeLoss(naive, &target{name: "safefs-none"}, torn))
	assert.False(t, unsafeLoss(flock, &target{name: "backing"}, torn))
	assert.False(t, unsafeLoss(naive, &target{name: "backing"}, fmt.Errorf("perl died")))
}

// TestTargetNames: every safefs variant of the table is a target.
func TestTargetNames(t *testing.T) {
	assert.Equal(t, []string{"backing", "byhand", "loopback", "byhand-loopback", "loopback-direct", "loopback-locks", "safefs", "safefs-none", "safefs-audit", "safefs-rmw-off", "safefs-nopt", "safefs-direct", "safefs-direct-none", "safefs-passthrough", "safefs-locks", "safefs-ptw", "safefs-ptw-none"}, targetNames)
}

var (
	rateCell = regexp.MustCompile(`^[0-9.]+ [a-zA-Z/]+ \([0-9.e-]+x, [0-9.e-]+x\)$`)
)

// TestBenchRows runs the new rows on every target with small sizes, real
// mounts and real Perl processes, and checks each cell of the markdown
// table: rates with both ratios, the counter as kept/expected, and mmap on
// safefs a rate too (shared maps work).
func TestBenchRows(t *testing.T) {
	testfs.Available(t)
	requirePerl(t)
	dir := wwwDir(t) // stat-www stats as www-data
	var out, errOut bytes.Buffer
	err := run([]string{"-dir", dir, "-markdown", "-targets", "backing,byhand,loopback,safefs,safefs-none",
		"-workloads", "seq-read-warm,mmap-read,stat,stat-www,naive-counter",
		"-seq-size", "4M", "-mmap-size", "1M", "-stat-n", "50", "-stat-passes", "2",
		"-counter-procs", "4", "-counter-runs", "20"}, &out, &errOut)
	t.Logf("table:\n%s\nstderr:\n%s", out.String(), errOut.String())
	assert.Empty(t, strings.TrimSpace(errOut.String()), "no run may fail (shared maps work on safefs)")
	require.NoError(t, err)

	rows := markdownRows(t, out.String())
	require.Equal(t, []string{"backing", "byhand", "loopback", "safefs", "safefs-none"}, rows["workload"])
	// byhand (column 1) has only the commit rows: "-" in these.
	for _, name := range []string{"seq-read-warm", "stat", "stat-www", "mmap-read", "naive counter, 4 x 20: kept / expected"} {
		require.Len(t, rows[name], 5, name)
		assert.Equal(t, "-", rows[name][1], name)
		rows[name] = append(rows[name][:1:1], rows[name][2:]...)
	}
	others := []string{"backing", "loopback", "safefs", "safefs-none"}
	for _, name := range []string{"seq-read-warm", "stat", "stat-www"} {
		for i, c := range rows[name] {
			assert.Regexp(t, rateCell, c, "%s on %s", name, others[i])
		}
	}
	mm := rows["mmap-read"]
	assert.Regexp(t, rateCell, mm[0])
	assert.Regexp(t, rateCell, mm[1])
	for _, c := range mm[2:] {
		assert.Regexp(t, `^([0-9.]+ MB/s \([0-9.e-]+x, [0-9.e-]+x\))$`, c)
	}
	counts := rows["naive counter, 4 x 20: kept / expected"]
	for i, c := range counts {
		if c == "torn" && !isSafefs(others[i]) {
			continue // two unlocked writers overlapped: the loss shown, not a failure
		}
		m := regexp.MustCompile(`^([0-9]+)/80$`).FindStringSubmatch(c)
		require.NotNil(t, m, "counter on %s: %q", others[i], c)
		kept, _ := strconv.Atoi(m[1])
		assert.True(t, kept >= 1 && kept <= 80, "counter on %s kept %d of 80", others[i], kept)
	}
	assertNoMount(t, dir)
}

// assertNoMount fails t if a mount under dir was left behind.
func assertNoMount(t *testing.T, dir string) {
	mounts, err := os.ReadFile("/proc/mounts")
	require.NoError(t, err)
	assert.NotContains(t, string(mounts), dir, "a mount was left behind")
}

// markdownRows maps each row's first cell to its other cells.
func markdownRows(t *testing.T, table string) map[string][]string {
	rows := map[string][]string{}
	for _, l := range strings.Split(table, "\n") {
		if !strings.HasPrefix(l, "| ") {
			continue
		}
		cells := strings.Split(strings.Trim(l, "| "), " | ")
		rows[cells[0]] = cells[1:]
	}
	require.NotEmpty(t, rows, "no table in the output")
	return rows
}

func requirePerl(t *testing.T) {
	if _, err := exec.LookPath("perl"); err == nil {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal("perl is missing and CI is set: the counter row needs it")
	}
	t.Skip("perl is missing")
}
