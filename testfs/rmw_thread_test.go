package testfs

// Read-modify-write sessions held by threads (issue 46): the request
// threads of one process (a servlet's JVM, a Python program's threads)
// wait for each other's sessions, so an unlocked read-modify-write
// keeps every update; a child process of the holder (a shell's cat)
// still joins its session; a thread that hands the file to another
// thread, or exits while holding a session, costs at worst rmw_wait.

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/safefs/safefs/fs"
)

// The servlet of the issue: 8 request threads x 25 requests.
const servletThreads, servletRounds = 8, 25

// javaClasses compiles testfs/java/RMWServlet.java into a directory
// www-data can read and returns it.
func javaClasses(t *testing.T) string {
	t.Helper()
	javac, err := exec.LookPath("javac")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("javac is missing, and CI is set")
		}
		t.Skip("javac is missing")
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		require.NoError(t, os.Chmod(d, 0o755))
	}
	src := filepath.Join(filepath.Dir(PerlScript("")), "java", "RMWServlet.java")
	out, err := exec.Command(javac, "-d", dir, src).CombinedOutput()
	require.NoError(t, err, "javac: %s", out)
	return dir
}

// servlet runs the servlet program as www-data: threads x rounds.
func servlet(t *testing.T, www Cred, classes, file string, threads, rounds int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	// A small JVM: the machine is shared.
	cmd := AsUser(exec.CommandContext(ctx, "java", "-XX:-UsePerfData", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
		"-Xmx64m", "-cp", classes, "RMWServlet", file, strconv.Itoa(threads), strconv.Itoa(rounds)), www)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "servlet: %s", out)
	return string(out)
}

// TestRMWServletThreads: one JVM, 8 threads x 25 read-modify-writes of
// one file (readAllLines, write with TRUNCATE_EXISTING). With the file
// selected by a glob, and with rmw=auto after one learning request,
// every update is kept. The program is learned as the JVM's executable
// and its first argument that is not an option (here the class path).
func TestRMWServletThreads(t *testing.T) {
	classes := javaClasses(t)
	for _, auto := range []bool{false, true} {
		t.Run(map[bool]string{false: "glob", true: "auto"}[auto], func(t *testing.T) {
			m, www, dir, logs := rmwSetup(t, func(o *fs.Options) {
				o.RMWWait = exactWait
				if auto {
					o.RMWAuto = true
				} else {
					o.RMWGlobs = []string{"count.txt"}
				}
			})
			file := newCounter(t, www, dir, "count.txt")
			start := 0
			if auto {
				learned := func() int {
					return logs.FilterMessageSnippet("rmw: learned a").FilterField(zap.String("path", "data/count.txt")).Len()
				}
				start = learnWith(t, learned, func() { servlet(t, www, classes, file, 1, 1) })
				stored, err := os.ReadFile(m.BackingPath(fs.InternalDir, "rmw-learned"))
				require.NoError(t, err)
				java, err := exec.LookPath("java")
				require.NoError(t, err)
				java, err = filepath.EvalSymlinks(java)
				require.NoError(t, err)
				assert.Contains(t, string(stored), `"`+java+" "+classes+`"`, "the JVM is learned by its class path")
			}
			out := servlet(t, www, classes, file, servletThreads, servletRounds)
			assertNoAnomalies(t, []string{out})
			assert.Equal(t, servletThreads*servletRounds, doneField([]string{out}, "rounds"))
			require.Equal(t, start+servletThreads*servletRounds, counter(t, readBoth(t, m, "data/count.txt")),
				"updates kept (stats %+v)", m.Stats())
			assert.Positive(t, m.Stats().RMWWaits, "threads waited for each other")
			requireNoGiveUp(t, m)
		})
	}
}

// TestRMWPythonThreads: a Python program's threads, each open().read()
// then open('w').write(), keep every update, with a glob and with
// rmw=auto after learning; with a child process (cat) between the read
// and the write of each request, the child joins its thread's session
// (it sees what the thread read) and nothing waits for ever.
func TestRMWPythonThreads(t *testing.T) {
	requireInterpreter(t, "python")
	for _, c := range []struct {
		name, mode string
		auto       bool
	}{{"glob", "counter", false}, {"auto", "counter", true}, {"family", "family", false}} {
		t.Run(c.name, func(t *testing.T) {
			m, www, dir, logs := rmwSetup(t, func(o *fs.Options) {
				o.RMWWait, o.RMWHold = exactWait, forever
				if c.auto {
					o.RMWAuto = true
				} else {
					o.RMWGlobs = []string{"count.txt"}
				}
			})
			file := newCounter(t, www, dir, "count.txt")
			start := 0
			if c.auto {
				learned := func() int { return logs.FilterMessageSnippet("rmw: learned a").Len() }
				start = learnWith(t, learned, func() { pythonThreads(t, www, c.mode, file, "1", "1") })
			}
			const threads, rounds = 8, 25
			out := pythonThreads(t, www, c.mode, file, strconv.Itoa(threads), strconv.Itoa(rounds))
			assertNoAnomalies(t, []string{out})
			require.Equal(t, start+threads*rounds, counter(t, readBoth(t, m, "data/count.txt")), "updates kept (stats %+v)", m.Stats())
			requireNoGiveUp(t, m)
		})
	}
}

// learnWith runs one learning request, and another if it was not
// learned (learning reads /proc within a bound, and learns nothing from
// a request it could not tell about: a loaded machine may need a
// second), up to three; it returns the requests run.
func learnWith(t *testing.T, learned func() int, request func()) int {
	t.Helper()
	for n := 1; n <= 3; n++ {
		request()
		if learned() > 0 {
			if n > 1 {
				t.Logf("learned at the %d-th request", n)
			}
			require.Equal(t, 1, learned(), "learned once")
			return n
		}
	}
	t.Fatal("not learned in 3 requests")
	return 0
}

func pythonThreads(t *testing.T, www Cred, args ...string) string {
	t.Helper()
	out, err := Perl{Lang: "python", Script: "rmw_threads.py", Args: args, As: &www, Limit: rmwDeadline}.Run()
	require.NoError(t, err)
	return out
}

// TestRMWThreadHandoff: thread A reads the file and keeps it open while
// thread B, which A waits for, writes it. B waits for A's session and
// goes on without one after rmw_wait (no deadlock, the documented wait;
// rmw_hold is an hour here, so nothing else ends it).
func TestRMWThreadHandoff(t *testing.T) {
	requireInterpreter(t, "python")
	m, www, dir, _ := rmwSetup(t, func(o *fs.Options) {
		o.RMWGlobs, o.RMWHold, o.RMWWait = []string{"count.txt"}, forever, 2*time.Second
	})
	file := newCounter(t, www, dir, "count.txt")
	out := pythonThreads(t, www, "handoff", file)
	assert.Equal(t, 1, doneField([]string{out}, "rounds"))
	require.Equal(t, 1, counter(t, readBoth(t, m, "data/count.txt")))
	st := m.Stats()
	assert.Equal(t, int64(1), st.RMWWaits, "B waited for A's session (stats %+v)", st)
	assert.Equal(t, int64(1), st.RMWGaveUp, "B went on after rmw_wait (stats %+v)", st)
}

// TestRMWThreadExit: thread A holds a session (the file open) and ends;
// thread B of the same process, waiting for it, gets the session at A's
// end (rmw_hold and rmw_wait are an hour). The status shows B waiting
// for A, both by thread.
func TestRMWThreadExit(t *testing.T) {
	requireInterpreter(t, "python")
	m, www, dir, _ := rmwSetup(t, func(o *fs.Options) {
		o.RMWGlobs, o.RMWHold, o.RMWWait = []string{"count.txt"}, forever, forever
	})
	file := newCounter(t, www, dir, "count.txt")
	ctx, cancel := context.WithTimeout(context.Background(), rmwDeadline) // a hang guard only
	defer cancel()
	cmd := Perl{Lang: "python", Script: "rmw_threads.py", Args: []string{"exit", file}, As: &www}.Command(ctx)
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	require.True(t, sc.Scan(), "no output: %v", sc.Err())
	require.Equal(t, "STARTED B", sc.Text())

	// B's open waits for A's session, or (sessions per process) B is done.
	backing := m.BackingPath("data", "count.txt")
	for deadline := time.Now().Add(rmwDeadline); m.Gauges().RMWWaiting == 0; time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(backing)
		require.NoError(t, err)
		require.Equal(t, "0\n", string(b), "B wrote without waiting for A's session")
		require.True(t, time.Now().Before(deadline), "B never waited")
	}
	ss := m.srv.Status().Sessions
	require.Len(t, ss, 1)
	assert.Equal(t, "data/count.txt", ss[0].Path)
	require.Len(t, ss[0].Waiters, 1)
	assert.Equal(t, uint32(cmd.Process.Pid), ss[0].Holder.PID)
	assert.Equal(t, uint32(cmd.Process.Pid), ss[0].Waiters[0].PID)
	assert.NotZero(t, ss[0].Holder.TID, "held by a thread")
	assert.NotZero(t, ss[0].Waiters[0].TID, "waited for by a thread")

	_, err = io.WriteString(in, "go\n")
	require.NoError(t, err)
	rest, _ := io.ReadAll(stdout)
	require.NoError(t, cmd.Wait())
	assert.Equal(t, 1, doneField([]string{string(rest)}, "rounds"), "output: %s", rest)
	require.Equal(t, 1, counter(t, readBoth(t, m, "data/count.txt")))
	st := m.Stats()
	assert.Equal(t, int64(1), st.RMWWaits, "stats %+v", st)
	requireNoGiveUp(t, m)
}
