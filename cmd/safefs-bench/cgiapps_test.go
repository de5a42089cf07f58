package main

import (
	"bytes"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/safefs/safefs/testfs"
)

func TestMedianRotated(t *testing.T) {
	assert.Equal(t, 2.0, median([]float64{3, 1, 2}))
	assert.Equal(t, 2.5, median([]float64{4, 1, 2, 3}))
	assert.Equal(t, []string{"b", "c", "a"}, rotated([]string{"a", "b", "c"}, 1))
	assert.Equal(t, []string{"a", "b", "c"}, rotated([]string{"a", "b", "c"}, 3))
}

// TestAppsExactness: a count short is lostError, a count over is an
// error too; a torn or interleaved log line is not a line.
func TestAppsExactness(t *testing.T) {
	assert.NoError(t, checkKept("x", 5, 5))
	assert.Equal(t, lostError{2}, checkKept("x", 3, 5))
	assert.Error(t, checkKept("x", 6, 5))
	whole, bad := logLines("1.2.3.4 10 r1 hit\n1.2.3.4 11 r2 hit\n")
	assert.Equal(t, [2]int{2, 0}, [2]int{whole, bad})
	whole, bad = logLines("1.2.3.4 10 r1 hit\n1.2.3.4 11 r2\n1.2.3.4 12 r3 hit1.2.3.4 13 r4 hit\n1.2")
	assert.Equal(t, [2]int{1, 3}, [2]int{whole, bad})
	assert.Equal(t, 0, guestbookEntries(guestbookInit))
	assert.Equal(t, 2, guestbookEntries(strings.Replace(guestbookInit, "<!--begin-->", "<!--begin-->\n"+entryMark+"\nA\n"+entryMark+"\nB", 1)))
}

// TestAppsMisses names the cells under the goal, with their ratio.
func TestAppsMisses(t *testing.T) {
	res := map[string]map[string]result{}
	for _, app := range cgiApps {
		res[app.name] = map[string]result{"backing": {ran: true, value: 100}, "safefs": {ran: true, value: 96}}
	}
	assert.Contains(t, appsMisses([]string{"backing", "safefs"}, res), ": met")
	assert.Contains(t, appsMisses([]string{"safefs"}, map[string]map[string]result{"cgi-hits": {"safefs": {ran: true, value: 1}}}), "no figure")
	res["cgi-hits"]["safefs"] = result{ran: true, value: 80}
	res["cgi-log"]["safefs"] = result{ran: true, err: errors.New("x")}
	assert.Equal(t, "goal: every row at least 0.95x the plain directory: missed by cgi-hits on safefs 0.80x",
		appsMisses([]string{"backing", "safefs"}, res))
}

// TestSoakSummary: the growth is from the first sample; the limit holds
// on the largest.
func TestSoakSummary(t *testing.T) {
	_, err := summarize([]int64{1})
	assert.Error(t, err)
	s, err := summarize([]int64{10240, 40960, 20480})
	require.NoError(t, err)
	assert.Equal(t, soakSummary{10240, 40960, 20480}, s)
	assert.True(t, s.within(32<<10))
	assert.False(t, s.within(20<<10))
	assert.Equal(t, "RSS start 10.0 MiB, max 40.0, end 20.0: growth +10.0 MiB at the end, +30.0 at the max (within 32 MiB)", s.String())
}

// requireApps skips (fails under CI) without Apache, Perl or GDBM_File.
func requireApps(t *testing.T) {
	requirePerl(t)
	err := func() error {
		if _, err := apacheBin(); err != nil {
			return err
		}
		_, err := perlOutput("use GDBM_File; use Fcntl;")
		return err
	}()
	if err == nil {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%v (.ci/run installs apache2 and perl)", err)
	}
	t.Skip(err)
}

// TestCGIAppsBench runs the cgi-apps rows briefly on the plain directory
// and safefs through a real Apache: every row a rate on both, every
// request kept (a count short would be an error cell and a failed run),
// the daemon's CPU shown for safefs only, no Apache left.
func TestCGIAppsBench(t *testing.T) {
	testfs.Available(t)
	requireApps(t)
	dir := wwwDir(t)
	t.Setenv("TMPDIR", dir)
	var out, errOut bytes.Buffer
	err := run([]string{"-dir", dir, "-markdown", "-cgi-apps", "-targets", "backing,safefs",
		"-cgi-apps-n", "20", "-cgi-apps-static-n", "100", "-cgi-apps-rounds", "2"}, &out, &errOut)
	t.Logf("table:\n%s\nstderr:\n%s", out.String(), errOut.String())
	require.NoError(t, err)
	assert.Empty(t, errOut.String())
	rows := markdownRows(t, out.String())
	for _, app := range cgiApps {
		require.Len(t, rows[app.name], 2, app.name)
		assert.Regexp(t, `^[0-9.]+ req/s \(1\.00x, \?\)$`, rows[app.name][0], app.name)
		assert.Regexp(t, `^[0-9.]+ req/s \([0-9.]+x, \?\)$`, rows[app.name][1], app.name)
		cpu := rows[app.name+": daemon CPU / request"]
		require.Len(t, cpu, 2, app.name)
		assert.Equal(t, "-", cpu[0])
	}
	assert.Regexp(t, regexp.MustCompile(`(?m)^goal: every row at least 0\.95x the plain directory: `), out.String())
	assert.Empty(t, apacheProcesses(t, dir), "Apache processes left behind")
}

// TestAppsSoak runs the soak for a moment: one mix at least, every
// request kept, and the RSS line.
func TestAppsSoak(t *testing.T) {
	testfs.Available(t)
	requireApps(t)
	dir := wwwDir(t)
	t.Setenv("TMPDIR", dir)
	var out, errOut bytes.Buffer
	err := run([]string{"-dir", dir, "-soak", "-soak-for", "1ms", "-cgi-apps-n", "10", "-cgi-apps-static-n", "50"}, &out, &errOut)
	t.Logf("out:\n%s\nstderr:\n%s", out.String(), errOut.String())
	require.NoError(t, err)
	assert.Regexp(t, `^soak: safefs, [0-9hms]+ of the cgi-apps mix \(-soak-for 1ms; a mix begun goes on to its end\): 90 requests in 1 mixes, every one kept; [0-9]+ samples, every 5s: RSS start [0-9.]+ MiB, max [0-9.]+, end [0-9.]+: growth [-+][0-9.]+ MiB at the end, \+[0-9.]+ at the max \(within 32 MiB\)\n$`, out.String())
	assert.Empty(t, apacheProcesses(t, dir), "Apache processes left behind")
}
