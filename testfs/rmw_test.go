package testfs

// Read-modify-write sessions (issue 11): unlocked counters lose no
// increment when their file is selected (rmw=auto after learning, or
// rmw=GLOB), and a session never makes a script fail or hang: a killed
// holder releases at once, a reader delays others by rmw_hold, cycles
// are broken, a wait on a lock safefs cannot see ends after rmw_wait.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/safefs/safefs/fs"
)

// forever is a hold or wait no test may reach: what ends a wait in such
// a test is the event under test, and the test's deadline (minutes, far
// below forever) turns a missing event into a failure, not a slow pass.
const forever = time.Hour

// rmwDeadline guards against a hang only.
const rmwDeadline = 3 * time.Minute

// exactWait is rmw_wait for the exactness tests: far above any honest
// wait (16 processes each holding a session for one commit), so that a
// loaded machine cannot make a waiter give up; gave-up waits are
// asserted to be 0 anyway.
const exactWait = time.Minute

// rmwSetup mounts with the session options set by edit, logs observed,
// and makes the www-data directory "data".
func rmwSetup(t *testing.T, edit func(o *fs.Options)) (*Mount, Cred, string, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	m, www, dir := setup(t, func(o *fs.Options) {
		o.Log = zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), core))
		o.RMWAuto, o.RMWGlobs = false, nil
		edit(o)
	})
	return m, www, dir, logs
}

func newCounter(t *testing.T, www Cred, dir, name string) string {
	t.Helper()
	file := filepath.Join(dir, name)
	RunPerl(t, &www, "write.pl", file, ">", "0\n")
	return file
}

func requireNoGiveUp(t *testing.T, m *Mount) {
	t.Helper()
	st := m.Stats()
	require.Zero(t, st.RMWGaveUp, "a wait was given up: %+v", st)
	require.Zero(t, st.RMWCycles, "a cycle was broken: %+v", st)
}

// naive runs the testfs naive counter, procs x runs, and checks that
// every increment was kept on top of start.
func naive(t *testing.T, m *Mount, www Cred, file string, start int) {
	t.Helper()
	ps := make([]Perl, naiveProcs)
	for i := range ps {
		ps[i] = Perl{Script: "naive_counter.pl", Args: []string{file, strconv.Itoa(naiveRuns)}, As: &www}
	}
	outs := runAll(t, ps)
	assertNoAnomalies(t, outs)
	rel, err := filepath.Rel(m.Dir, file)
	require.NoError(t, err)
	got := counter(t, readBoth(t, m, rel))
	require.Equal(t, start+naiveProcs*naiveRuns, got, "increments kept (stats %+v)", m.Stats())
}

// TestRMWNaiveCounterAuto: under rmw=auto the naive counter's first
// request teaches safefs the (file, program) pair; from then on 16 x 400
// concurrent requests keep every increment. The pair is logged and
// stored in the internal directory.
func TestRMWNaiveCounterAuto(t *testing.T) {
	t.Parallel() // heavy: see the package doc
	m, www, dir, logs := rmwSetup(t, func(o *fs.Options) { o.RMWAuto, o.RMWWait = true, exactWait })
	file := newCounter(t, www, dir, "count.txt")
	RunPerl(t, &www, "naive_counter.pl", file, "1") // the learning increment
	require.Equal(t, 1, logs.FilterMessageSnippet("rmw: learned").FilterField(zap.String("path", "data/count.txt")).Len(),
		"learning logged once")
	stored, err := os.ReadFile(m.BackingPath(fs.InternalDir, "rmw-learned"))
	require.NoError(t, err)
	perl, err := exec.LookPath("perl")
	require.NoError(t, err)
	perl, err = filepath.EvalSymlinks(perl) // what /proc/PID/exe names
	require.NoError(t, err)
	require.Contains(t, string(stored), strconv.Itoa(int(www.Uid))+` "data/count.txt" "`+perl+" "+PerlScript("naive_counter.pl")+`"`)

	naive(t, m, www, file, 1)
	st := m.Stats()
	assert.GreaterOrEqual(t, st.RMWSessions, int64(naiveProcs*naiveRuns), "one session per request")
	assert.Positive(t, st.RMWWaits)
	requireNoGiveUp(t, m)
}

// TestRMWNaiveCounterGlob: rmw=GLOB selects the file for every process
// from the start: 16 x 400 exact.
func TestRMWNaiveCounterGlob(t *testing.T) {
	t.Parallel() // heavy: see the package doc
	m, www, dir, _ := rmwSetup(t, func(o *fs.Options) { o.RMWGlobs, o.RMWWait = []string{"*.txt"}, exactWait })
	file := newCounter(t, www, dir, "count.txt")
	naive(t, m, www, file, 0)
	requireNoGiveUp(t, m)
}

// TestRMWLearnedPersists: what rmw=auto learned is read back at the
// next mount (and logged): the first request after it takes a session.
func TestRMWLearnedPersists(t *testing.T) {
	m, www, dir, logs := rmwSetup(t, func(o *fs.Options) { o.RMWAuto = true })
	file := newCounter(t, www, dir, "count.txt")
	RunPerl(t, &www, "naive_counter.pl", file, "1")
	require.Zero(t, m.Stats().RMWSessions, "the learning request itself had no session")
	m.Remount(t)
	require.Equal(t, 1, logs.FilterMessage("rmw: learned").FilterField(zap.String("path", "data/count.txt")).Len(),
		"the pair is listed at mount")
	RunPerl(t, &www, "naive_counter.pl", file, "1")
	require.Equal(t, int64(1), m.Stats().RMWSessions)
}

// rmwCounter runs rmw_counter.pl METHOD: one learning run, then procs x
// runs concurrently, all kept.
func rmwCounter(t *testing.T, method string) {
	m, www, dir, _ := rmwSetup(t, func(o *fs.Options) { o.RMWAuto, o.RMWWait = true, exactWait })
	file := newCounter(t, www, dir, "count.txt")
	RunPerl(t, &www, "rmw_counter.pl", method, file, "1")
	const procs, runs = 8, 100
	ps := make([]Perl, procs)
	for i := range ps {
		ps[i] = Perl{Script: "rmw_counter.pl", Args: []string{method, file, strconv.Itoa(runs)}, As: &www}
	}
	assertNoAnomalies(t, runAll(t, ps))
	require.Equal(t, 1+procs*runs, counter(t, readBoth(t, m, "data/count.txt")), "stats %+v", m.Stats())
	requireNoGiveUp(t, m)
}

// TestRMWPlusCounter: open +<, read, rewrite, close, no flock: learned
// from the write on the handle it read, then exact.
func TestRMWPlusCounter(t *testing.T) { rmwCounter(t, "plus") }

// TestRMWSharedLockCounter: LOCK_SH read, close, reopen with LOCK_EX:
// the lock does not span the read and the write; exact with sessions.
func TestRMWSharedLockCounter(t *testing.T) { rmwCounter(t, "shared") }

// TestRMWLockedNotLearned: a counter that holds a flock across its read
// and rewrite (lock_counter.pl flockfile) is not learned.
func TestRMWLockedNotLearned(t *testing.T) {
	m, www, dir, _ := rmwSetup(t, func(o *fs.Options) { o.RMWAuto = true })
	file := newCounter(t, www, dir, "count.txt")
	RunPerl(t, &www, "lock_counter.pl", "flockfile", file, "3", filepath.Join(dir, "count.lock"))
	RunPerl(t, &www, "lock_counter.pl", "flock", file, "3", filepath.Join(dir, "count.lock"))
	_, err := os.Stat(m.BackingPath(fs.InternalDir, "rmw-learned"))
	require.ErrorIs(t, err, os.ErrNotExist, "nothing learned")
	require.Equal(t, 6, counter(t, readBoth(t, m, "data/count.txt")))
}

// steps starts rmw_steps.pl with the given steps as www-data.
type stepper struct {
	cmd  *exec.Cmd
	out  strings.Builder
	done chan error
}

func startSteps(t *testing.T, www Cred, steps ...string) *stepper {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rmwDeadline)
	s := &stepper{cmd: Perl{Script: "rmw_steps.pl", Args: steps, As: &www}.Command(ctx), done: make(chan error, 1)}
	s.cmd.Stdout, s.cmd.Stderr = &s.out, &s.out
	require.NoError(t, s.cmd.Start())
	go func() { s.done <- s.cmd.Wait(); cancel() }()
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		<-s.done
	})
	return s
}

// wait waits for the end, within the hang deadline.
func (s *stepper) wait(t *testing.T, what string) error {
	t.Helper()
	select {
	case err := <-s.done:
		s.done <- err
		return err
	case <-time.After(rmwDeadline):
		t.Fatalf("%s: no end within %v (a hang); output:\n%s", what, rmwDeadline, &s.out)
		return nil
	}
}

func (s *stepper) requireOK(t *testing.T, what string) {
	t.Helper()
	require.NoError(t, s.wait(t, what), "%s; output:\n%s", what, &s.out)
}

// awaitFile waits for a signal file of a step script.
func awaitFile(t *testing.T, p string) {
	t.Helper()
	for deadline := time.Now().Add(rmwDeadline); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(p); err == nil {
			return
		}
	}
	t.Fatalf("%s never appeared", p)
}

// TestRMWKilledHolderReleases: a process holding a session (hold and
// wait set to an hour) is killed with SIGKILL: the waiting opener goes
// on at once, with a session (not given up).
func TestRMWKilledHolderReleases(t *testing.T) {
	m, www, dir, _ := rmwSetup(t, func(o *fs.Options) { o.RMWGlobs, o.RMWHold, o.RMWWait = []string{"*.txt"}, forever, forever })
	file := newCounter(t, www, dir, "count.txt")
	sig := t.TempDir()
	holder := startSteps(t, www, "hold:"+file, "touch:"+sig+"/held", "sleep:3600")
	awaitFile(t, sig+"/held")
	waiter := startSteps(t, www, "incr:"+file)
	awaitWaiting(t, m, waiter, "the opener")
	require.NoError(t, holder.cmd.Process.Signal(syscall.SIGKILL))
	waiter.requireOK(t, "opener after the holder was killed")
	require.Equal(t, 1, counter(t, readBoth(t, m, "data/count.txt")))
	assert.Equal(t, int64(1), m.Stats().RMWWaits)
	requireNoGiveUp(t, m)
}

// awaitWaiting waits until an open waits for a session (the mount's
// gauge), failing at once if opener ends first: it did not wait.
func awaitWaiting(t *testing.T, m *Mount, opener *stepper, what string) {
	t.Helper()
	for deadline := time.Now().Add(rmwDeadline); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m.Gauges().RMWWaiting > 0 {
			return
		}
		select {
		case err := <-opener.done:
			opener.done <- err // for the cleanup's wait: it must not hang
			t.Fatalf("%s did not wait for the session: it ended (%v) with no open waiting; stats %+v\n%s", what, err, m.Stats(), &opener.out)
		default:
		}
	}
	t.Fatalf("%s: no open waited for a session within %v (a hang); stats %+v\n%s", what, rmwDeadline, m.Stats(), &opener.out)
}

// TestRMWReaderHold: a process that read the file and closed it without
// writing, and lives on, delays the next opener until rmw_hold after its
// close, never by rmw_wait (an hour here).
func TestRMWReaderHold(t *testing.T) {
	// With rmw_hold an hour: the reader's session outlives its close,
	// held by nothing but the hold, the opener still waiting for it.
	t.Run("outlives-close", func(t *testing.T) {
		m, www, dir, _ := rmwSetup(t, func(o *fs.Options) { o.RMWGlobs, o.RMWHold, o.RMWWait = []string{"*.txt"}, forever, forever })
		file := newCounter(t, www, dir, "count.txt")
		sig := t.TempDir()
		reader := startSteps(t, www, "hold:"+file, "touch:"+sig+"/read", "await:"+sig+"/close", "close:"+file, "sleep:3600")
		awaitFile(t, sig+"/read")
		opener := startSteps(t, www, "incr:"+file)
		awaitWaiting(t, m, opener, "the opener after a reader")
		require.NoError(t, os.WriteFile(sig+"/close", nil, 0o644))
		awaitHoldOnly(t, m, opener, "data/count.txt")
		require.NoError(t, reader.cmd.Process.Signal(syscall.SIGKILL)) // its exit ends the session
		opener.requireOK(t, "opener after the reader was killed")
		require.Equal(t, 1, counter(t, readBoth(t, m, "data/count.txt")))
		requireNoGiveUp(t, m)
	})
	// With rmw_hold 1 s: the opener is seen waiting while the reader
	// still has the file open; after the close its wait ends with a
	// session while the reader lives (so not by its exit) and without
	// giving up (so not by rmw_wait): by the hold.
	t.Run("ends-after-hold", func(t *testing.T) {
		m, www, dir, _ := rmwSetup(t, func(o *fs.Options) { o.RMWGlobs, o.RMWHold, o.RMWWait = []string{"*.txt"}, time.Second, forever })
		file := newCounter(t, www, dir, "count.txt")
		sig := t.TempDir()
		reader := startSteps(t, www, "hold:"+file, "touch:"+sig+"/read", "await:"+sig+"/close", "close:"+file, "sleep:3600")
		awaitFile(t, sig+"/read")
		opener := startSteps(t, www, "incr:"+file)
		awaitWaiting(t, m, opener, "the opener after a reader")
		require.NoError(t, os.WriteFile(sig+"/close", nil, 0o644))
		opener.requireOK(t, "opener after a reader")
		select {
		case err := <-reader.done:
			reader.done <- err
			t.Fatalf("the reader ended (%v): the wait may have ended by its exit, not by the hold\n%s", err, &reader.out)
		default:
		}
		require.Equal(t, 1, counter(t, readBoth(t, m, "data/count.txt")))
		st := m.Stats()
		require.Equal(t, int64(1), st.RMWWaits, "stats %+v", st)
		requireNoGiveUp(t, m)
	})
}

// awaitHoldOnly waits until the session on path is held by nothing but
// rmw_hold (no open under it) with one opener waiting, failing at once
// if that opener ends first: the session ended at the last close.
func awaitHoldOnly(t *testing.T, m *Mount, opener *stepper, path string) {
	t.Helper()
	var last []fs.SessionStatus
	for deadline := time.Now().Add(rmwDeadline); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		last = m.srv.Status().Sessions
		for _, s := range last {
			if s.Path == path && s.Open == 0 && len(s.Waiters) == 1 {
				return
			}
		}
		select {
		case err := <-opener.done:
			opener.done <- err
			t.Fatalf("the opener ended (%v) after the reader's close: its session did not outlive the close; sessions %+v\n%s", err, last, &opener.out)
		default:
		}
	}
	t.Fatalf("no session of %s held only by rmw_hold with one waiter within %v; sessions %+v", path, rmwDeadline, last)
}

// TestRMWForkedChild: a holder whose child opens and rewrites the file
// (a CGI script that forks) does not wait for itself (rmw_hold and
// rmw_wait are an hour: such a wait would hang), while another process
// that opens the file meanwhile waits for the holder's session: no
// increment is lost.
func TestRMWForkedChild(t *testing.T) {
	m, www, dir, _ := rmwSetup(t, func(o *fs.Options) { o.RMWGlobs, o.RMWHold, o.RMWWait = []string{"*.txt"}, forever, forever })
	file := newCounter(t, www, dir, "count.txt")
	sig := t.TempDir()
	holder := startSteps(t, www, "hold:"+file, "touch:"+sig+"/held", "await:"+sig+"/go", "forkincr:"+file, "incr:"+file)
	awaitFile(t, sig+"/held")
	other := startSteps(t, www, "incr:"+file)
	awaitWaiting(t, m, other, "another process")
	require.NoError(t, os.WriteFile(sig+"/go", nil, 0o644))
	holder.requireOK(t, "holder with a forked writer")
	other.requireOK(t, "another process")
	require.Equal(t, 3, counter(t, readBoth(t, m, "data/count.txt")))
	st := m.Stats()
	// The other process waited; the holder's last open may wait for it in
	// turn (the child's commit ended the session), never the child.
	require.NotZero(t, st.RMWWaits, "stats %+v", st)
	requireNoGiveUp(t, m)
}

// TestRMWCycle: A opens X then Y while B opens Y then X, each keeping
// the first open: the wait that would close the cycle is refused at
// once (rmw_wait is an hour), and both finish. The one that went on
// without a session does not wait at its next open of that file either.
func TestRMWCycle(t *testing.T) {
	m, www, dir, logs := rmwSetup(t, func(o *fs.Options) { o.RMWGlobs, o.RMWHold, o.RMWWait = []string{"*.txt"}, time.Second, forever })
	x, y := newCounter(t, www, dir, "x.txt"), newCounter(t, www, dir, "y.txt")
	sig := t.TempDir()
	a := startSteps(t, www, "hold:"+x, "touch:"+sig+"/a", "await:"+sig+"/b", "incr:"+y, "incr:"+x)
	b := startSteps(t, www, "hold:"+y, "touch:"+sig+"/b", "await:"+sig+"/a", "incr:"+x, "incr:"+y)
	a.requireOK(t, "A")
	b.requireOK(t, "B")
	require.Equal(t, 2, counter(t, readBoth(t, m, "data/x.txt")))
	require.Equal(t, 2, counter(t, readBoth(t, m, "data/y.txt")))
	st := m.Stats()
	require.Equal(t, int64(1), st.RMWCycles, "stats %+v", st)
	require.Zero(t, st.RMWGaveUp)
	require.Equal(t, 1, logs.FilterMessageSnippet("cycle").Len())
}

// TestRMWFlockRace: A holds a flock on a lock file and then opens the
// counter; B opens the counter first and then asks for the flock. The
// wait for B's session is one safefs cannot see through: it ends after
// rmw_wait, with one warning naming the path, both pids and their
// command lines, and both finish.
func TestRMWFlockRace(t *testing.T) {
	m, www, dir, logs := rmwSetup(t, func(o *fs.Options) {
		o.RMWGlobs, o.RMWHold, o.RMWWait = []string{"count.txt"}, forever, 2*time.Second
	})
	file := newCounter(t, www, dir, "count.txt")
	lock := filepath.Join(dir, "count.lock")
	sig := t.TempDir()
	a := startSteps(t, www, "flock:"+lock, "touch:"+sig+"/a", "await:"+sig+"/b", "incr:"+file)
	b := startSteps(t, www, "await:"+sig+"/a", "hold:"+file, "touch:"+sig+"/b", "flock:"+lock, "incr:"+file)
	a.requireOK(t, "A (flock, then open)")
	b.requireOK(t, "B (open, then flock)")
	require.Equal(t, 2, counter(t, readBoth(t, m, "data/count.txt")))
	require.Equal(t, int64(1), m.Stats().RMWGaveUp)
	warn := logs.FilterMessageSnippet("waited rmw_wait").All()
	require.Len(t, warn, 1)
	f := warn[0].ContextMap()
	assert.Equal(t, "data/count.txt", f["path"])
	assert.Equal(t, int64(a.cmd.Process.Pid), int64(f["pid"].(uint32)))
	assert.Equal(t, int64(b.cmd.Process.Pid), int64(f["holder_pid"].(int32)))
	assert.Contains(t, f["cmdline"], "rmw_steps.pl flock:")
	assert.Contains(t, f["holder_cmdline"], "rmw_steps.pl await:")
}

// TestRMWStatsLine: the stats line (SIGUSR1, unmount) carries the
// session counters.
func TestRMWStatsLine(t *testing.T) {
	m, www, dir, logs := rmwSetup(t, func(o *fs.Options) { o.RMWGlobs = []string{"*.txt"} })
	file := newCounter(t, www, dir, "count.txt")
	RunPerl(t, &www, "naive_counter.pl", file, "2")
	m.srv.LogStats()
	lines := logs.FilterMessage("stats").All()
	require.NotEmpty(t, lines)
	f := lines[len(lines)-1].ContextMap()
	assert.Equal(t, int64(2), f["rmw_sessions"])
	for _, k := range []string{"rmw_waits", "rmw_cycles_broken", "rmw_waits_given_up"} {
		assert.Contains(t, f, k)
	}
}

// TestRMWLearnedUntrusted: a learned file someone else could have
// written (here: www-data's) is not read: the internal directory is
// quarantined at mount like for a planted journal.
func TestRMWLearnedUntrusted(t *testing.T) {
	m, www, _, logs := rmwSetup(t, func(o *fs.Options) { o.RMWAuto = true })
	m.stop(t)
	p := m.BackingPath(fs.InternalDir, "rmw-learned")
	require.NoError(t, os.WriteFile(p, []byte(`33 "data/count.txt" "/usr/bin/perl /x.pl"`+"\n"), 0o600))
	require.NoError(t, os.Chown(p, int(www.Uid), int(www.Gid)))
	m.start(t)
	require.Zero(t, logs.FilterMessage("rmw: learned").Len(), "the planted pair was read")
	aside, err := filepath.Glob(m.BackingPath(fs.InternalDir + ".untrusted-*"))
	require.NoError(t, err)
	require.Len(t, aside, 1, "the internal directory was quarantined")
}
