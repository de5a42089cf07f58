package main

// The metrics endpoint and the audit trail of the real daemon, under a
// workload of Perl processes through a real mount: the scraped numbers
// and the audit lines must match what the workload did.
//
// The lock timeout is provoked as in fs/lockwait_test.go: a read lease
// that this process takes on the backing file of A's current version
// holds back the daemon's O_WRONLY open of it in an append commit, which,
// with SAFEFS_TEST_LEASE_WAIT in the daemon's environment, tries again
// under A's commit lock until the lease is released. A second appender's
// commit waits for that lock past lock_timeout.

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// scrape reads the endpoint: sample ("name{labels}") -> value.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	c := http.Client{Timeout: waitLimit}
	resp, err := c.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		v, err := strconv.ParseFloat(l[i+1:], 64)
		require.NoError(t, err, "line %q", l)
		out[l[:i]] = v
	}
	require.NoError(t, sc.Err())
	return out
}

// scrapeUntil scrapes until sample has value want (a release the kernel
// sends after close() returned), and returns that scrape.
func scrapeUntil(t *testing.T, url, sample string, want float64) map[string]float64 {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		m := scrape(t, url)
		if m[sample] == want {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %v, want %v, after %v", sample, m[sample], want, waitLimit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var metricsURL = regexp.MustCompile(`http://[0-9.:]+/metrics`)

// startObservedMount mounts with metrics on a free port and the audit
// trail, and returns the daemon and its metrics URL.
func startObservedMount(t *testing.T, backing, mnt, auditFile string) (*mountProc, string) {
	t.Helper()
	p := launchMount(t, exec.Command(safefsBin, "mount", "-o",
		"metrics=127.0.0.1:0,audit="+auditFile+",lock_timeout=1s", backing, mnt), mnt)
	p.waitMounted(t)
	url := metricsURL.FindString(p.out.String())
	require.NotEmpty(t, url, "no metrics URL logged:\n%s", p.out)
	return p, url
}

// killedWriter writes a byte to file and kills itself before closing.
func killedWriter(t *testing.T, file string) {
	t.Helper()
	cmd := exec.Command("perl", "-e", `open(my $f, ">", $ARGV[0]) or die "open: $!"; syswrite($f, "k") or die; kill("KILL", $$); sleep 60`, file)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "perl: %v %s", err, out)
	ws := ee.Sys().(syscall.WaitStatus)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "perl ended with %v: %s", ee, out)
}

// takeLease takes a read lease on path, waiting (guard only) for the
// release of a handle that still holds it open for writing.
func takeLease(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	deadline := time.Now().Add(waitLimit)
	for {
		_, err := unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_RDLCK)
		if err == nil {
			break
		}
		require.ErrorIs(t, err, unix.EAGAIN)
		require.False(t, time.Now().After(deadline), "no read lease on %s in %v", path, waitLimit)
		time.Sleep(10 * time.Millisecond)
	}
	t.Cleanup(func() {
		_, _ = unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_UNLCK)
		f.Close()
	})
	return f
}

// waitLeaseBreak waits until an open for writing breaks the lease.
func waitLeaseBreak(t *testing.T, f *os.File) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		l, err := unix.FcntlInt(f.Fd(), unix.F_GETLEASE, 0)
		require.NoError(t, err)
		if l == unix.F_UNLCK {
			return
		}
		require.False(t, time.Now().After(deadline), "the lease was not broken in %v", waitLimit)
		time.Sleep(10 * time.Millisecond)
	}
}

// auditLines reads the trail.
func auditLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), "line %q", l)
		out = append(out, m)
	}
	return out
}

// waitAuditLines waits (guard only) until the trail has n lines.
func waitAuditLines(t *testing.T, path string, n int) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		if _, err := os.Stat(path); err == nil {
			if got := auditLines(t, path); len(got) >= n || time.Now().After(deadline) {
				return got
			}
		} else if time.Now().After(deadline) {
			t.Fatalf("no %s after %v", path, waitLimit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// summary is what a line says in short: event path kind result.
func summary(l map[string]any) string {
	return strings.Join([]string{str(l["event"]), str(l["path"]), str(l["kind"]), str(l["result"])}, " ")
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func TestMetricsAndAuditUnderWorkload(t *testing.T) {
	requireFuse(t)
	requireRoot(t)
	requireTool(t, "perl")
	backing, mnt, dir := tempDir(t), tempDir(t), tempDir(t)
	trail := filepath.Join(dir, "audit.log")
	t.Setenv("SAFEFS_TEST_LEASE_WAIT", "10m") // the lock timeout below
	p, url := startObservedMount(t, backing, mnt, trail)

	// Recovery at this mount found an empty journal.
	m := scrape(t, url)
	assert.Equal(t, 0.0, m[`safefs_recovery{result="records"}`])

	data := []byte("version one\n")
	for i := range 5 {
		commitOK(t, "replace", filepath.Join(mnt, "f"+strconv.Itoa(i)), data)
	}
	for range 3 {
		commitOK(t, "append", filepath.Join(mnt, "log"), []byte("line\n"))
	}
	commitOK(t, "replace", filepath.Join(mnt, "h"), data)
	require.NoError(t, os.Link(filepath.Join(mnt, "h"), filepath.Join(mnt, "h2")))
	commitOK(t, "replace", filepath.Join(mnt, "h"), []byte("in place\n")) // two links: in place
	killedWriter(t, filepath.Join(mnt, "k"))

	// A file replaced directly in BACKING under a writer: ESTALE.
	commitOK(t, "replace", filepath.Join(mnt, "s"), data)
	stale := startPausedCommit(t, "replace", filepath.Join(mnt, "s"), []byte("stale bytes\n"), "close")
	require.NoError(t, os.WriteFile(filepath.Join(backing, "s.new"), []byte("outside\n"), 0o644))
	require.NoError(t, os.Rename(filepath.Join(backing, "s.new"), filepath.Join(backing, "s")))
	require.Contains(t, stale.finish(t), "close err 116 ", "ESTALE expected")

	// The lock timeout: holder's commit holds A's lock, victim's times out.
	a := filepath.Join(mnt, "A")
	commitOK(t, "replace", a, []byte("base\n"))
	hold, victimData := []byte("holder's appended line\n"), []byte("victim's line\n")
	holder := startPausedCommit(t, "append", a, hold, "close")
	victim := startPausedCommit(t, "append", a, victimData, "close")
	commitOK(t, "replace", a, []byte("pivot\n")) // a version none of them holds open
	lease := takeLease(t, filepath.Join(backing, "A"))
	_, err := io.WriteString(holder.stdin, "go\n")
	require.NoError(t, err)
	closeStdin(t, holder.stdin)
	waitLeaseBreak(t, lease)

	// Scraped while the holder's commit is blocked: two writers open,
	// both pending versions counted.
	m = scrapeUntil(t, url, "safefs_open_handles", 2)
	assert.Equal(t, float64(len(hold)+len(victimData)), m["safefs_pending_bytes"])
	assert.Equal(t, 9.0, m[`safefs_commits_total{kind="replace"}`])
	assert.Equal(t, 3.0, m[`safefs_commits_total{kind="append"}`])
	assert.Equal(t, 1.0, m[`safefs_commits_total{kind="inplace"}`])
	assert.Equal(t, 1.0, m[`safefs_rejected_total{reason="stale"}`])
	assert.Equal(t, 1.0, m["safefs_killed_writers_total"])

	require.Contains(t, victim.finish(t), "close err 110 ", "ETIMEDOUT expected")
	_, err = unix.FcntlInt(lease.Fd(), unix.F_SETLEASE, unix.F_UNLCK)
	require.NoError(t, err)
	holder.p.wait(t)
	require.Contains(t, holder.out.String(), "close ok")

	m = scrapeUntil(t, url, "safefs_open_handles", 0)
	want := map[string]float64{
		`safefs_commits_total{kind="replace"}`:         9,
		`safefs_commits_total{kind="append"}`:          4,
		`safefs_commits_total{kind="inplace"}`:         1,
		`safefs_rejected_total{reason="stale"}`:        1,
		`safefs_rejected_total{reason="lock_timeout"}`: 1,
		"safefs_killed_writers_total":                  1,
		"safefs_rejected_files":                        2,
		"safefs_pending_bytes":                         0,
		"safefs_rejected_dropped_total":                0,
		"safefs_audit_dropped_total":                   0,
		"safefs_commit_duration_seconds_count":         14,
		"safefs_lock_wait_seconds_count":               16, // commits and rejections
	}
	for k, v := range want {
		assert.Equal(t, v, m[k], k)
	}
	assert.GreaterOrEqual(t, m["safefs_rejected_bytes"], 2*4096.0)
	// The victim waited lock_timeout (1s); the holder's commit outlasted that wait.
	assert.LessOrEqual(t, m[`safefs_lock_wait_seconds_bucket{le="0.5"}`], 15.0)
	assert.LessOrEqual(t, m[`safefs_commit_duration_seconds_bucket{le="0.5"}`], 13.0)

	lines := waitAuditLines(t, trail, 17)
	var got []string
	for _, l := range lines {
		// A file with two links is named by either (h or h2).
		got = append(got, strings.Replace(summary(l), "commit h2 inplace", "commit h inplace", 1))
	}
	assert.Equal(t, []string{
		"commit f0 replace committed", "commit f1 replace committed", "commit f2 replace committed",
		"commit f3 replace committed", "commit f4 replace committed",
		"commit log append committed", "commit log append committed", "commit log append committed",
		"commit h replace committed", "commit h inplace committed",
		"reject k replace killed",
		"commit s replace committed", "reject s replace stale",
		"commit A replace committed", "commit A replace committed",
		"reject A append lock_timeout", "commit A append committed",
	}, got)
	checkAuditFields(t, backing, lines)

	// Rotation: rename the trail, SIGHUP, and new lines go to a new file.
	require.NoError(t, os.Rename(trail, trail+".1"))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	waitAuditLines(t, trail, 0)
	commitOK(t, "replace", filepath.Join(mnt, "after"), data)
	waitAuditLines(t, trail, 1)
	stopMount(t, p)
	assert.Len(t, auditLines(t, trail+".1"), 17, "the rotated file got no more lines")
	after := auditLines(t, trail)
	require.Len(t, after, 1)
	assert.Equal(t, "commit after replace committed", summary(after[0]))
}

// checkAuditFields checks the fields of the trail's lines beyond their kind.
func checkAuditFields(t *testing.T, backing string, lines []map[string]any) {
	t.Helper()
	for _, l := range lines {
		assert.NotZero(t, l["pid"], "%v", l)
		assert.Equal(t, 0.0, l["uid"], "%v", l)
		assert.GreaterOrEqual(t, l["duration_us"], l["lock_wait_us"], "%v", l)
		_, err := time.Parse(time.RFC3339Nano, str(l["time"]))
		assert.NoError(t, err, "%v", l)
		if l["result"] == "killed" {
			assert.Equal(t, "[perl]", l["cmdline"], "a dying writer's name")
			continue
		}
		assert.Contains(t, l["cmdline"], "commit.pl", "%v", l)
	}
	assert.Equal(t, float64(len("version one\n")), lines[0]["bytes"])
	assert.Equal(t, float64(len("line\n")), lines[5]["bytes"], "an append's bytes are the appended ones")
	for _, i := range []int{12, 15} {
		kept := str(lines[i]["kept"])
		require.True(t, strings.HasPrefix(kept, ".safefs/rejected/u0-"), "%v", lines[i])
		_, err := os.Stat(filepath.Join(backing, kept))
		assert.NoError(t, err, "the kept bytes are where the line says")
	}
	assert.GreaterOrEqual(t, lines[15]["lock_wait_us"], 1e6, "the victim waited lock_timeout")
	assert.Equal(t, "lock wait timed out", lines[15]["error"])
}

func TestMetricsAddressInUse(t *testing.T) {
	requireFuse(t)
	requireRoot(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	backing, mnt := tempDir(t), tempDir(t)
	r := runSafefs(t, nil, "mount", "-o", "metrics="+ln.Addr().String(), backing, mnt)
	assert.Equal(t, exitMetrics, r.code, "stderr:\n%s", r.stderr)
	assert.Regexp(t, `^safefs: metrics address: listen tcp 127\.0\.0\.1:\d+: bind: address already in use\n$`, r.stderr)
	_, mounted := mountType(t, mnt)
	assert.False(t, mounted)
}

func TestAuditFileCannotBeOpened(t *testing.T) {
	requireFuse(t)
	requireRoot(t)
	backing, mnt := tempDir(t), tempDir(t)
	r := runSafefs(t, nil, "mount", "-o", "audit="+filepath.Join(backing, "no", "such", "dir"), backing, mnt)
	assert.Equal(t, exitAudit, r.code, "stderr:\n%s", r.stderr)
	assert.Regexp(t, `^safefs: audit file: open .*/no/such/dir: no such file or directory\n$`, r.stderr)
	_, mounted := mountType(t, mnt)
	assert.False(t, mounted)
}

func TestMetricsBadAddress(t *testing.T) {
	r := runSafefs(t, nil, "mount", "-o", "metrics=9100", "/nonexistent-b", "/nonexistent-m")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, `bad value for option metrics: "9100"`)
}
