package testfs

// Read-modify-write sessions across users (security round 3, item 5):
// a www-data process that could only read root's file, with root's
// job's command line as its own, held the session of the pair root's
// job had been learned with (root's job waited rmw_wait each run); a
// flood of bogus pairs by one user filled the set, so that another
// user's naive counter was never learned and lost increments.

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/rmw"
)

// startSpoofHold runs spoof_hold.pl as c and returns once it holds the
// file; closing the returned pipe (done in cleanup too) lets it close.
func startSpoofHold(t *testing.T, c Cred, argv0, file string) (release func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rmwDeadline) // a hang guard only
	cmd := Perl{Script: "spoof_hold.pl", Args: []string{argv0, file}, As: &c}.Command(ctx)
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(out)
	release = func() {
		if in.Close() == nil {
			_, _ = io.Copy(io.Discard, out)
			_ = cmd.Wait()
		}
		cancel()
	}
	t.Cleanup(release)
	require.True(t, sc.Scan() && sc.Text() == "HOLD", "spoof_hold.pl did not hold %s: %q %v", file, sc.Text(), sc.Err())
	return release
}

// TestRMWOtherUIDNeverWaits: root's naive job teaches safefs its pair;
// a www-data process that may only read root's file, named as root's
// job on its command line, opens it and keeps it open. Root's next run
// takes its session without any wait.
func TestRMWOtherUIDNeverWaits(t *testing.T) {
	m, www, dir, logs := rmwSetup(t, func(o *fs.Options) { o.RMWAuto = true })
	file := filepath.Join(dir, "job.txt")
	require.NoError(t, os.WriteFile(file, []byte("0\n"), 0o644)) // root's: www-data may read it only
	RunPerl(t, nil, "naive_counter.pl", file, "1")               // the learning run
	require.Equal(t, 1, logs.FilterMessageSnippet("rmw: learned a").FilterField(zap.String("path", "data/job.txt")).Len(),
		"root's job learned")

	release := startSpoofHold(t, www, "perl "+PerlScript("naive_counter.pl"), file)
	before := m.Stats()
	RunPerl(t, nil, "naive_counter.pl", file, "1")
	st := m.Stats()
	assert.Equal(t, before.RMWWaits, st.RMWWaits, "root's job waited for a session (stats %+v)", st)
	assert.Equal(t, before.RMWGaveUp, st.RMWGaveUp, "root's job gave up waiting (stats %+v)", st)
	assert.Greater(t, st.RMWSessions, before.RMWSessions, "root's job took its session")
	release()
	assert.Equal(t, 2, counter(t, readBoth(t, m, "data/job.txt")))
}

// TestRMWFloodOtherUID: www-data teaches safefs more pairs than the
// whole set may hold; it is bounded at its own share, and another
// user's naive counter is still learned at its first run and keeps
// every increment after it.
func TestRMWFloodOtherUID(t *testing.T) {
	m, www, dir, logs := rmwSetup(t, func(o *fs.Options) { o.RMWAuto, o.RMWWait = true, exactWait })
	nobody := LookupUser(t, "nobody")
	RunPerl(t, &www, "rmw_flood.pl", filepath.Join(dir, "flood"), strconv.Itoa(rmw.MaxLearned+8))
	flood := logs.FilterMessageSnippet("rmw: learned a").Len()
	t.Logf("www-data's flood: %d pairs learned", flood)
	assert.LessOrEqual(t, flood, rmw.MaxPerUID, "pairs learned for www-data")

	other := m.Path("other")
	wwwDir(t, &nobody, other)
	file := newCounter(t, nobody, other, "count.txt")
	RunPerl(t, &nobody, "naive_counter.pl", file, "1") // the learning increment
	require.Equal(t, 1, logs.FilterMessageSnippet("rmw: learned a").FilterField(zap.String("path", "other/count.txt")).Len(),
		"nobody's counter learned after www-data's flood")

	const procs, runs = 8, 40
	ps := make([]Perl, procs)
	for i := range ps {
		ps[i] = Perl{Script: "naive_counter.pl", Args: []string{file, strconv.Itoa(runs)}, As: &nobody}
	}
	assertNoAnomalies(t, runAll(t, ps))
	require.Equal(t, 1+procs*runs, counter(t, readBoth(t, m, "other/count.txt")), "increments kept (stats %+v)", m.Stats())
	requireNoGiveUp(t, m)
}
