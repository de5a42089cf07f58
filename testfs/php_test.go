package testfs

// PHP CGI scripts' ways of keeping a file (testfs/php/), 16 processes at
// a time as www-data: counters without a lock, with file_put_contents's
// LOCK_EX, and with fopen('c+') and flock; a section guarded by
// flock(LOCK_EX|LOCK_NB); a log written with fopen('a').

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/safefs/safefs/fs"
)

// phpProcs processes at a time, phpRuns requests each.
const phpProcs, phpRuns = 16, 25

// runPHP runs procs copies of script with args as www, at once, and
// requires no anomaly; it returns the outputs.
func runPHP(t *testing.T, www Cred, procs int, script string, args ...string) []string {
	t.Helper()
	ps := make([]Perl, procs)
	for i := range ps {
		ps[i] = Perl{Lang: "php", Script: script, As: &www, Args: args}
	}
	outs := runAll(t, ps)
	assertNoAnomalies(t, outs)
	return outs
}

// TestPHPCounters: counter.php under the default rmw=auto. The
// unlocked counter (file_get_contents, file_put_contents) and the same
// with LOCK_EX on the write (which locks only the write: on a plain
// directory both lose updates) are learned from their first request,
// whose write opens the file before any lock is taken, and then keep
// every update. The flock counter (fopen 'c+', flock) keeps every
// update by its own lock and is not learned.
func TestPHPCounters(t *testing.T) {
	requireInterpreter(t, "php")
	for _, method := range []string{"naive", "lockex", "flock"} {
		t.Run(method, func(t *testing.T) {
			m, www, dir, logs := rmwSetup(t, func(o *fs.Options) { o.RMWAuto, o.RMWWait = true, exactWait })
			file := newCounter(t, www, dir, "count.txt")
			runPHP(t, www, 1, "counter.php", method, file, "1") // the learning request
			learned := logs.FilterMessageSnippet("rmw: learned").FilterField(zap.String("path", "data/count.txt")).Len()
			if method == "flock" {
				require.Zero(t, learned, "a locked counter is not learned")
			} else {
				require.Equal(t, 1, learned, "learned from the first request")
			}
			runPHP(t, www, phpProcs, "counter.php", method, file, strconv.Itoa(phpRuns))
			got := counter(t, readBoth(t, m, "data/count.txt"))
			require.Equal(t, 1+phpProcs*phpRuns, got, "updates kept (stats %+v)", m.Stats())
			requireNoGiveUp(t, m)
		})
	}
}

// TestPHPLockExWholeWithoutSessions: with sessions off (rmw=off), the
// LOCK_EX counter may lose updates, as on a plain directory (its read is
// not under its lock), but every read finds a whole count, never an
// empty or torn file (contract 1). The count kept is logged.
func TestPHPLockExWholeWithoutSessions(t *testing.T) {
	requireInterpreter(t, "php")
	m, www, dir, _ := rmwSetup(t, func(o *fs.Options) {})
	file := newCounter(t, www, dir, "count.txt")
	runPHP(t, www, phpProcs, "counter.php", "lockex", file, strconv.Itoa(phpRuns))
	got := counter(t, readBoth(t, m, "data/count.txt"))
	assert.LessOrEqual(t, got, phpProcs*phpRuns)
	t.Logf("LOCK_EX counter without sessions: %d of %d updates kept", got, phpProcs*phpRuns)
}

// TestPHPSingleExecution: once.php's section guarded by
// flock(LOCK_EX|LOCK_NB). While a process holds the lock, 16 tries all
// find it held, with EWOULDBLOCK. Then 16 processes x 25 tries at once:
// never two in the section (its O_EXCL marker), every try either ran
// or saw EWOULDBLOCK, and the section's own unlocked counter counts
// exactly the runs.
func TestPHPSingleExecution(t *testing.T) {
	requireInterpreter(t, "php")
	m, www, dir := setup(t)
	lock := filepath.Join(dir, "job.lock")
	RunPerl(t, &www, "write.pl", filepath.Join(dir, "count"), ">", "0\n")

	holder := startPHP(t, www, "once.php", "hold", lock, dir)
	awaitFile(t, filepath.Join(dir, "held"))
	outs := runPHP(t, www, phpProcs, "once.php", "try", lock, dir, "1")
	require.Equal(t, 0, doneField(outs, "ran"), "a try ran while another held the lock")
	require.Equal(t, phpProcs, doneField(outs, "skipped"))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "release"), nil, 0o644))
	holder.requireOK(t, "the holder")

	outs = runPHP(t, www, phpProcs, "once.php", "try", lock, dir, strconv.Itoa(phpRuns))
	ran := doneField(outs, "ran")
	require.Equal(t, phpProcs*phpRuns, ran+doneField(outs, "skipped"), "every try ran or was refused")
	require.Positive(t, ran)
	require.Equal(t, ran, counter(t, readBoth(t, m, "data/count")), "the guarded counter")
	t.Logf("%d of %d tries ran the section", ran, phpProcs*phpRuns)
}

// startPHP starts script as www, to be waited for with requireOK.
func startPHP(t *testing.T, www Cred, script string, args ...string) *stepper {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rmwDeadline)
	s := &stepper{cmd: Perl{Lang: "php", Script: script, Args: args, As: &www}.Command(ctx), done: make(chan error, 1)}
	s.cmd.Stdout, s.cmd.Stderr = &s.out, &s.out
	require.NoError(t, s.cmd.Start())
	go func() { s.done <- s.cmd.Wait(); cancel() }()
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		<-s.done
	})
	return s
}

// TestPHPAppendLog: 16 processes x 25 entries of 4 lines with
// fopen('a'), a line per fwrite: every entry is in the log once, its
// lines whole and together, each writer's in its order (contract 6).
func TestPHPAppendLog(t *testing.T) {
	requireInterpreter(t, "php")
	m, www, dir := setup(t)
	file := filepath.Join(dir, "access.log")
	RunPerl(t, &www, "write.pl", file, ">", "")
	ps := make([]Perl, phpProcs)
	for i := range ps {
		ps[i] = Perl{Lang: "php", Script: "appender.php", As: &www,
			Args: []string{file, strconv.Itoa(i), strconv.Itoa(phpRuns), strconv.Itoa(appendLines)}}
	}
	assertNoAnomalies(t, runAll(t, ps))
	data := readBoth(t, m, "data/access.log")
	assert.Empty(t, checkLog(data, phpProcs, phpRuns, appendLines), "the log (%d bytes)", len(data))
}
