package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWholePage: a version is whole; the same version cut short, the newer
// version cut to the older one's length, and a page with another
// version's trailer are not.
func TestWholePage(t *testing.T) {
	pc := pageCache{}
	v1, v2 := pageInto(nil, 1), pageInto(nil, 2)
	require.NotEqual(t, len(v1), len(v2), "versions must differ in length")
	assert.True(t, pc.wholePage(v1))
	assert.True(t, pc.wholePage(pageInto(nil, 0)))
	assert.Len(t, pageInto(nil, 0), 79<<10, "version 0 is the issue's 79 KiB page")
	assert.False(t, pc.wholePage(v1[:len(v1)-1]))
	assert.False(t, pc.wholePage(v2[:min(len(v1), len(v2)-1)]))
	mix := append(bytes.Clone(v1[:len(v1)-20]), v2[len(v2)-20:]...)
	assert.False(t, pc.wholePage(mix))
	assert.False(t, pc.wholePage(nil))
}

// TestApacheRewriter: the Perl rewriter, run as www-data, writes the same
// pages as pageInto, and after SIGTERM the file is exactly the last
// version it reports.
func TestApacheRewriter(t *testing.T) {
	requirePerl(t)
	dir := wwwDir(t)
	page := filepath.Join(dir, apachePage)
	www, err := wwwData()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(page, pageInto(nil, 0), 0o644))
	require.NoError(t, os.Chown(page, int(www.Uid), int(www.Gid)))
	rw, err := startRewriter(t.Context(), page, 0)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(page)
		return !bytes.HasPrefix(b, []byte("safefs-bench page 0 "))
	}, time.Minute, 10*time.Millisecond, "the rewriter never rewrote the page")
	n, err := rw.stop()
	require.NoError(t, err)
	b, err := os.ReadFile(page)
	require.NoError(t, err)
	assert.True(t, n >= 1)
	want := pageInto(nil, n)
	assert.True(t, bytes.Equal(want, b), "the page (%d bytes) is not version %d as pageInto makes it (%d bytes)", len(b), n, len(want))
}

// requirePerlApache skips (fails under CI) without Perl or Apache.
func requirePerlApache(t *testing.T) {
	t.Helper()
	requirePerl(t)
	if _, err := apacheBin(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("apache2 is not installed (.ci/run installs it)")
		}
		t.Skip("apache2 is not installed (apt-get install apache2)")
	}
}

// TestApacheBench runs the apache workload briefly on the backing target
// with a real Apache and checks the two rows: a rate, and cut-short counts
// that add up. No Apache process is left.
func TestApacheBench(t *testing.T) {
	requirePerlApache(t)
	dir := wwwDir(t)
	t.Setenv("TMPDIR", dir) // Apache's config dir: found below if a process is left
	const n = 400
	var out, errOut bytes.Buffer
	err := run([]string{"-dir", dir, "-markdown", "-targets", "backing", "-workloads", "apache",
		"-apache-n", strconv.Itoa(n)}, &out, &errOut)
	t.Logf("table:\n%s\nstderr:\n%s", out.String(), errOut.String())
	require.NoError(t, err)
	assert.Empty(t, errOut.String())

	rows := markdownRows(t, out.String())
	require.Len(t, rows["apache"], 1)
	assert.Regexp(t, `^[0-9.]+ req/s \(1\.00x, \?\)$`, rows["apache"][0])
	cut := rows["apache: cut short / 400 responses"]
	require.Len(t, cut, 1)
	m := regexp.MustCompile(`^([0-9.]+) % \(([0-9]+)/([0-9]+): ([0-9]+) dropped, ([0-9]+) short, ([0-9]+) torn; ([0-9]+) rewrites\)$`).FindStringSubmatch(cut[0])
	require.NotNil(t, m, "cut-short cell %q", cut[0])
	num := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
	assert.Equal(t, n, num(3), "responses")
	assert.Equal(t, num(2), num(4)+num(5)+num(6), "cut short = dropped + short + torn")
	assert.LessOrEqual(t, num(2), n)
	assert.Positive(t, num(7), "the page was never rewritten")
	pct, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	assert.InDelta(t, 100*float64(num(2))/n, pct, 0.01)
	assert.Empty(t, apacheProcesses(t, dir), "Apache processes left behind")
}

// wwwDir is a temporary directory that www-data can reach (t.TempDir and
// its parent are 0700).
func wwwDir(t *testing.T) string {
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		require.NoError(t, os.Chmod(d, 0o755))
	}
	return dir
}

// apacheProcesses lists the processes whose command line names dir.
func apacheProcesses(t *testing.T, dir string) []string {
	cmds, err := filepath.Glob("/proc/[0-9]*/cmdline")
	require.NoError(t, err)
	var left []string
	for _, p := range cmds {
		b, _ := os.ReadFile(p)
		if s := strings.ReplaceAll(string(b), "\x00", " "); strings.Contains(s, dir) {
			left = append(left, filepath.Base(filepath.Dir(p))+": "+s)
		}
	}
	return left
}

// TestCGIPHPFlockBench runs the cgi-php-flock workload briefly on the
// backing target under a real Apache: a rate, every request counted.
func TestCGIPHPFlockBench(t *testing.T) {
	for _, need := range []func() error{func() error { _, err := apacheBin(); return err }, func() error { _, err := os.Stat(phpCGI); return err }} {
		if err := need(); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%v (.ci/run installs apache2 and php-cgi)", err)
			}
			t.Skip(err)
		}
	}
	dir := wwwDir(t)
	t.Setenv("TMPDIR", dir)
	var out, errOut bytes.Buffer
	err := run([]string{"-dir", dir, "-markdown", "-targets", "backing", "-workloads", "cgi-php-flock", "-cgi-n", "200"}, &out, &errOut)
	t.Logf("table:\n%s\nstderr:\n%s", out.String(), errOut.String())
	require.NoError(t, err)
	rows := markdownRows(t, out.String())
	require.Len(t, rows["cgi-php-flock"], 1)
	assert.Regexp(t, `^[0-9.]+ req/s \(1\.00x, \?\)$`, rows["cgi-php-flock"][0])
	assert.Empty(t, apacheProcesses(t, dir), "Apache processes left behind")
}

// TestGuestbookEntries: a whole version of the guestbook page counts its
// entries; one cut short, or with a trailer that does not match its
// entries, is not a version.
func TestGuestbookEntries(t *testing.T) {
	page := guestbookInitial()
	assert.Equal(t, guestbookSeed, gbPageEntries(page))
	assert.Equal(t, -1, gbPageEntries(page[:len(page)-1]))
	assert.Equal(t, -1, gbPageEntries(page[:len(page)/2]))
	fewer := bytes.Replace(page, []byte("<!--entry-->"), nil, 1)
	assert.Equal(t, -1, gbPageEntries(fewer))
}

// TestGuestbookBench runs the guestbook-page workload briefly on the
// backing target under a real Apache: a rate, and a cut-short cell whose
// counts add up; every post is on the page (else the run fails).
func TestGuestbookBench(t *testing.T) {
	requirePerlApache(t)
	dir := wwwDir(t)
	t.Setenv("TMPDIR", dir)
	var out, errOut bytes.Buffer
	err := run([]string{"-dir", dir, "-markdown", "-targets", "backing", "-workloads", "guestbook-page", "-guestbook-n", "100"}, &out, &errOut)
	t.Logf("table:\n%s\nstderr:\n%s", out.String(), errOut.String())
	require.NoError(t, err)
	rows := markdownRows(t, out.String())
	require.Len(t, rows["guestbook-page"], 1)
	assert.Regexp(t, `^[0-9.]+ posts/s \(1\.00x, \?\)$`, rows["guestbook-page"][0])
	cut := rows["guestbook-page: cut short / 100 fetches"]
	require.Len(t, cut, 1)
	m := regexp.MustCompile(`^[0-9.]+ % \(([0-9]+)/100: ([0-9]+) dropped, ([0-9]+) short, ([0-9]+) torn; ([0-9]+) posts\)$`).FindStringSubmatch(cut[0])
	require.NotNil(t, m, "cut-short cell %q", cut[0])
	num := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
	assert.Equal(t, num(1), num(2)+num(3)+num(4), "cut short = dropped + short + torn")
	assert.Positive(t, num(5), "no post was made")
	assert.Empty(t, apacheProcesses(t, dir), "Apache processes left behind")
}
