package testfs

// Long-lived appenders (docs/appenders.md): a FastCGI script or
// a daemon keeps its log open for append and writes one line per
// request. Its complete lines become visible to other processes while it
// lives, within append_publish (1 s), a partial last line never; killed
// by a signal, it keeps every complete line. No assertion depends on
// timing: a test waits (with a hang guard) for what must happen while
// the writer is alive and has not closed; before the change nothing
// showed before close, so those waits failed.

import (
	"fmt"
	"math/rand/v2"
	"os"
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
)

// visibleGuard guards a wait for a line to become visible against a hang
// only: the promised delay is 1 s, a loaded machine may take longer, and
// a test never judges the delay.
const visibleGuard = 30 * time.Second

// padLen is the pad of request n's line in long_appender.pl.
func padLen(n int) int {
	if n%17 == 0 {
		return 20000
	}
	return n*37%300 + 10
}

// appLine is the line long_appender.pl ID writes for request n.
func appLine(id, n int) string {
	return fmt.Sprintf("id=%d req=%d pad=%s end\n", id, n, strings.Repeat("x", padLen(n)))
}

var appLineRe = regexp.MustCompile(`^id=(\d+) req=(\d+) pad=(x*) end$`)

// appLog is a log written by long_appender.pl processes after the lines
// of old: for each appender, the requests of its lines in file order.
type appLog map[int][]int

// parseAppLog checks data: old, then whole lines of appenders only (no
// torn or mixed line, nothing after the last newline). It returns each
// appender's requests in file order, and the problems found.
func parseAppLog(data []byte, old string) (appLog, []string) {
	var problems []string
	bad := func(format string, args ...any) {
		if len(problems) < 10 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	got := appLog{}
	rest, ok := strings.CutPrefix(string(data), old)
	if !ok {
		bad("the file does not start with its old lines: %q", data[:min(len(data), 80)])
		return got, problems
	}
	if rest != "" && !strings.HasSuffix(rest, "\n") {
		bad("a partial line at the end: %q", rest[strings.LastIndexByte(rest, '\n')+1:][:min(60, len(rest)-strings.LastIndexByte(rest, '\n')-1)])
	}
	for i, l := range strings.Split(strings.TrimSuffix(rest, "\n"), "\n") {
		if l == "" && rest == "" {
			break
		}
		m := appLineRe.FindStringSubmatch(l)
		if m == nil {
			bad("line %d is not an appender's whole line: %q", i+1, l[:min(len(l), 60)])
			continue
		}
		id, _ := strconv.Atoi(m[1])
		n, _ := strconv.Atoi(m[2])
		if len(m[3]) != padLen(n) {
			bad("line %d (id=%d req=%d) is torn or mixed: pad %d, want %d", i+1, id, n, len(m[3]), padLen(n))
			continue
		}
		got[id] = append(got[id], n)
	}
	return got, problems
}

// checkServed checks appender id's requests in the log: 1..k in order,
// each once, with acked <= k <= acked+extra (requests begun but not
// acknowledged may be there, whole, or not).
func (l appLog) checkServed(t *testing.T, id, acked, extra int) {
	t.Helper()
	reqs := l[id]
	for i, n := range reqs {
		if n != i+1 {
			t.Errorf("appender %d: line %d of its own is request %d, want %d (lost, repeated or out of order): %v", id, i+1, n, i+1, short(reqs))
			return
		}
	}
	assert.GreaterOrEqual(t, len(reqs), acked, "appender %d: %d acknowledged requests, %d lines kept", id, acked, len(reqs))
	assert.LessOrEqual(t, len(reqs), acked+extra, "appender %d: lines of requests never begun", id)
}

func short(s []int) string {
	if len(s) <= 12 {
		return fmt.Sprint(s)
	}
	return fmt.Sprint(s[:6], "...", s[len(s)-6:])
}

// readLog reads rel through the mount (this test process is another
// process than the writers) and checks it (parseAppLog).
func readLog(t *testing.T, m *Mount, rel, old string) appLog {
	t.Helper()
	data, err := os.ReadFile(m.Path(rel))
	require.NoError(t, err)
	got, problems := parseAppLog(data, old)
	require.Empty(t, problems, "%s read through the mount (%s)", rel, summary(data))
	return got
}

// waitVisible polls rel through the mount until appender id's lines
// reach request n, checking every read, while the writer p lives.
func waitVisible(t *testing.T, m *Mount, rel, old string, p *proc, id, n int) {
	t.Helper()
	require.NoError(t, visible(m, rel, old, p, id, n))
}

// visible is waitVisible's wait, for any goroutine: the reason it failed.
func visible(m *Mount, rel, old string, p *proc, id, n int) error {
	deadline := time.Now().Add(visibleGuard)
	for {
		data, err := os.ReadFile(m.Path(rel))
		if err != nil {
			return err
		}
		got, problems := parseAppLog(data, old)
		if len(problems) > 0 {
			return fmt.Errorf("%s read through the mount (%s): %v", rel, summary(data), problems)
		}
		if reqs := got[id]; len(reqs) > 0 && reqs[len(reqs)-1] >= n {
			return nil
		}
		if p.cmd.ProcessState != nil {
			return fmt.Errorf("appender %d ended (%v) before its request %d was visible", id, p.cmd.ProcessState, n)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("appender %d's request %d is not visible to another process after %v while the writer lives (visible: %v)",
				id, n, visibleGuard, short(got[id]))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// send writes one request line to the script.
func (p *proc) send(t *testing.T, req string) {
	t.Helper()
	_, err := fmt.Fprintln(p.in, req)
	require.NoError(t, err)
}

// end closes the script's stdin and waits for its exit, which must be 0.
func (p *proc) end(t *testing.T) {
	t.Helper()
	require.NoError(t, p.in.Close())
	require.NoError(t, p.cmd.Wait(), "stderr %s", p.errb.String())
}

// TestAppendersVisibleWhileAlive: the first row. A long-lived
// appender's lines become visible to another process while it lives and
// has not closed, each whole, a line written in pieces only once it is
// complete; its close adds nothing.
func TestAppendersVisibleWhileAlive(t *testing.T) {
	m, www, dir := setup(t)
	const rel, old = "data/app.log", "old line\n"
	file := filepath.Join(dir, "app.log")
	writeVia(t, www, file, []byte(old))
	p := start(t, Perl{Script: "long_appender.pl", As: &www, Args: []string{file, "1"}})
	for n := 1; n <= 3; n++ {
		p.send(t, strconv.Itoa(n))
		p.expect(t, "OK "+strconv.Itoa(n))
		waitVisible(t, m, rel, old, p, 1, n)
	}
	// A line written in pieces, the last one later: never torn (each
	// read above and below checks every line).
	p.send(t, "half 4")
	p.expect(t, "HALF 4")
	readLog(t, m, rel, old)
	p.send(t, "rest 4")
	p.expect(t, "OK 4")
	waitVisible(t, m, rel, old, p, 1, 4)
	p.send(t, "17") // a 20 KB line: more than the daemon keeps in memory
	p.expect(t, "OK 17")
	waitVisible(t, m, rel, old, p, 1, 17)

	p.send(t, "close")
	p.expect(t, "CLOSED")
	p.end(t)
	want := old
	for _, n := range []int{1, 2, 3, 4, 17} {
		want += appLine(1, n)
	}
	assert.Equal(t, want, string(readBoth(t, m, rel)), "after the close: each line once")
}

// TestAppendersKilled: the second row. An appender killed by a
// signal keeps every line that became visible and every complete line it
// wrote, and drops its partial last line.
func TestAppendersKilled(t *testing.T) {
	m, www, dir := setup(t)
	const old = "old line\n"
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			name := strings.ReplaceAll(sig.String(), " ", "_") + ".log"
			rel, file := "data/"+name, filepath.Join(dir, name)
			writeVia(t, www, file, []byte(old))
			p := start(t, Perl{Script: "long_appender.pl", As: &www, Args: []string{file, "1"}})
			for n := 1; n <= 2; n++ {
				p.send(t, strconv.Itoa(n))
				p.expect(t, "OK "+strconv.Itoa(n))
			}
			waitVisible(t, m, rel, old, p, 1, 2)
			// Complete, perhaps not visible yet; then a partial line.
			p.send(t, "3")
			p.expect(t, "OK 3")
			p.send(t, "half 4")
			p.expect(t, "HALF 4")
			require.NoError(t, p.cmd.Process.Signal(sig))
			err := p.cmd.Wait()
			ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
			require.True(t, ok && ws.Signaled() && ws.Signal() == sig, "writer ended by %v", err)
			want := old + appLine(1, 1) + appLine(1, 2) + appLine(1, 3)
			assert.Equal(t, want, string(readBoth(t, m, rel)), "killed by %v: every complete line kept, the partial one dropped", sig)
		})
	}
}

// TestAppendersFastCGIKilled: long-lived request loops, FastCGI style,
// three processes appending to one log, each line in three writes, every
// 17th line larger than what the daemon keeps in memory. Each is killed
// mid-run by a signal, some in the middle of a line. Every request
// acknowledged is in the log, whole, once and in order; nothing is torn
// or mixed, and a reader polling the log meanwhile only ever sees whole
// lines.
func TestAppendersFastCGIKilled(t *testing.T) {
	m, www, dir := setup(t)
	const rel, old = "data/access.log", "old line\n"
	file := filepath.Join(dir, "access.log")
	writeVia(t, www, file, []byte(old))
	stop := filepath.Join(t.TempDir(), "STOP")
	reader := start(t, Perl{Script: "line_reader.pl", As: &www, Args: []string{file, stop}})

	sigs := []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM, syscall.SIGHUP}
	acked := make([]int, len(sigs))
	extra := make([]int, len(sigs))
	var wg sync.WaitGroup
	for i, sig := range sigs {
		id := i + 1
		p := start(t, Perl{Script: "long_appender.pl", As: &www, Args: []string{file, strconv.Itoa(id)}})
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(id), 47))
			runs := 60 + rnd.IntN(60)
			for n := 1; n <= runs; n++ {
				if _, err := fmt.Fprintln(p.in, n); err != nil {
					t.Errorf("appender %d: request %d: %v", id, n, err)
					return
				}
				if line, err := p.out.ReadString('\n'); err != nil || line != fmt.Sprintf("OK %d\n", n) {
					t.Errorf("appender %d: request %d: answer %q, %v; stderr %s", id, n, line, err, p.errb.String())
					return
				}
				acked[i] = n
				if n == runs/2 { // visible while it lives
					if err := visible(m, rel, old, p, id, n); err != nil {
						t.Error(err)
						return
					}
				}
				time.Sleep(time.Duration(rnd.IntN(20)) * time.Millisecond)
			}
			if id%2 == 1 { // killed in the middle of a line
				fmt.Fprintf(p.in, "half %d\n", runs+1)
				if line, err := p.out.ReadString('\n'); err != nil || line != fmt.Sprintf("HALF %d\n", runs+1) {
					t.Errorf("appender %d: half request: %q, %v", id, line, err)
				}
			} else { // or right after one, perhaps not read yet
				fmt.Fprintf(p.in, "%d\n", runs+1)
				extra[i] = 1
			}
			if err := p.cmd.Process.Signal(sig); err != nil {
				t.Errorf("appender %d: kill: %v", id, err)
			}
			_ = p.cmd.Wait()
			if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != sig {
				t.Errorf("appender %d ended by %v, not %v", id, p.cmd.ProcessState, sig)
			}
		})
	}
	wg.Wait()
	require.NoError(t, os.WriteFile(stop, nil, 0o644))
	rest := reader.finish(t)
	assertNoAnomalies(t, []string{rest})

	data := readBoth(t, m, rel)
	got, problems := parseAppLog(data, old)
	require.Empty(t, problems, "the log after every appender was killed (%s)", summary(data))
	for i := range sigs {
		got.checkServed(t, i+1, acked[i], extra[i])
	}
	t.Logf("requests acknowledged %v, lines kept %d/%d/%d; reader: %s", acked, len(got[1]), len(got[2]), len(got[3]), strings.TrimSpace(rest))
}

// soakDuration is the soak's length: SAFEFS_TEST_SOAK (a Go duration,
// such as 10m) or 20 s.
func soakDuration(t *testing.T) time.Duration {
	v := os.Getenv("SAFEFS_TEST_SOAK")
	if v == "" {
		return 20 * time.Second
	}
	d, err := time.ParseDuration(v)
	require.NoError(t, err, "SAFEFS_TEST_SOAK")
	return d
}

// TestAppendersSoak: four long-lived appenders write lines to one log
// for the soak's length (20 s; SAFEFS_TEST_SOAK=10m for the long form)
// while a reader polls it. The log grows while they live; the reader only
// ever sees whole lines; the pending bytes the daemon holds stay bounded;
// at the end each appender's lines are all there, in order, whole. The
// daemon's RSS (this test process, which serves the mount: the writers
// and the reader are other processes) is logged.
func TestAppendersSoak(t *testing.T) {
	t.Parallel() // heavy: see the package doc
	m, www, dir := setup(t)
	const rel, old = "data/soak.log", "old line\n"
	file := filepath.Join(dir, "soak.log")
	writeVia(t, www, file, []byte(old))
	stop := filepath.Join(t.TempDir(), "STOP")
	reader := start(t, Perl{Script: "line_reader.pl", As: &www, Args: []string{file, stop}})
	d := soakDuration(t)
	secs := max(int(d/time.Second), 1)

	const writers = 4
	ps := make([]*proc, writers)
	for i := range ps {
		ps[i] = start(t, Perl{Script: "long_appender.pl", As: &www, Args: []string{file, strconv.Itoa(i + 1)}})
		ps[i].send(t, fmt.Sprintf("run %d %d", secs, 5+5*i))
	}
	// Visible while they run: the log grows before any of them is done.
	deadline := time.Now().Add(visibleGuard)
	for {
		got := readLog(t, m, rel, old)
		if len(got) == writers {
			break
		}
		require.True(t, time.Now().Before(deadline), "after %v, lines of only %d of %d running appenders are visible", visibleGuard, len(got), writers)
		time.Sleep(50 * time.Millisecond)
	}

	var rss []int64
	var maxPending int64
	ran := make([]int, writers)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i, p := range ps {
			line, err := p.out.ReadString('\n')
			if _, serr := fmt.Sscanf(line, "RAN %d\n", &ran[i]); err != nil || serr != nil {
				t.Errorf("appender %d: %q, %v; stderr %s", i+1, line, err, p.errb.String())
			}
		}
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-tick.C:
		}
		maxPending = max(maxPending, m.Gauges().PendingBytes)
		rss = append(rss, selfRSS(t))
	}
	for _, p := range ps {
		p.send(t, "close")
		p.expect(t, "CLOSED")
		p.end(t)
	}
	require.NoError(t, os.WriteFile(stop, nil, 0o644))
	rest := reader.finish(t)
	assertNoAnomalies(t, []string{rest})

	data := readBoth(t, m, rel)
	got, problems := parseAppLog(data, old)
	require.Empty(t, problems, "the log after the soak (%s)", summary(data))
	for i := range ps {
		got.checkServed(t, i+1, ran[i], 0)
	}
	// Bounded: each appender's pending bytes are published once they
	// reach 8 MiB, whatever the delay.
	assert.LessOrEqual(t, maxPending, int64(writers*(8<<20+64<<10)), "pending bytes the daemon held")
	t.Logf("soak %v: %d bytes, lines per appender %d/%d/%d/%d; reader: %s; max pending %d bytes; RSS (KiB, once a second) first %d, max %d, last %d",
		d, len(data), len(got[1]), len(got[2]), len(got[3]), len(got[4]), strings.TrimSpace(rest), maxPending,
		rss[0]>>10, maxOf(rss)>>10, rss[len(rss)-1]>>10)
}

func maxOf(s []int64) int64 {
	m := int64(0)
	for _, v := range s {
		m = max(m, v)
	}
	return m
}

// selfRSS is this process's resident set size in bytes.
func selfRSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			var kb int64
			_, _ = fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return kb << 10
		}
	}
	return 0
}
