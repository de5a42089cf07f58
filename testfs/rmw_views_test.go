package testfs

// Read-only requests of a learned script (issue 48): once a CGI
// script's read-modify-write of a file is learned, its requests of a
// class judged read-only (here the GETs, by REQUEST_METHOD) open the
// file without a session and run concurrently, while its POSTs keep
// every update.

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/rmw"
)

// bbs is a run of rmw_bbs.pl: n requests of method, one process each.
func bbs(www Cred, method, file string, n int, barrier ...string) Perl {
	return Perl{Script: "rmw_bbs.pl", Args: append([]string{file, strconv.Itoa(n)}, barrier...), As: &www,
		Env: []string{"REQUEST_METHOD=" + method}, Limit: rmwDeadline}
}

func runBBS(t *testing.T, p Perl) {
	t.Helper()
	out, err := p.Run()
	require.NoError(t, err)
	assertNoAnomalies(t, []string{out})
}

// TestRMWReadOnlyRequests: a script learned from its POST (read, then
// rewrite) shows the file on GET. Once ReadOnlyAfter GETs have ended
// without writing, 16 concurrent GETs all overlap (each counts the
// others that have read the file and wait for the rest: with sessions
// they could not); then 8 posters and 8 viewers at once keep every
// update. A GET that writes makes GETs take sessions again (logged), and
// concurrent writing GETs keep every update.
func TestRMWReadOnlyRequests(t *testing.T) {
	// rmw_hold is an hour: a session ends at its holder's commit or exit
	// only, as a CGI request's does (it exits sooner than rmw_hold).
	m, www, dir, logs := rmwSetup(t, func(o *fs.Options) { o.RMWAuto, o.RMWWait, o.RMWHold = true, exactWait, forever })
	file := newCounter(t, www, dir, "bbs.txt")
	learned := func() int {
		return logs.FilterMessageSnippet("rmw: learned a").FilterField(zap.String("path", "data/bbs.txt")).Len()
	}
	base := learnWith(t, learned, func() { runBBS(t, bbs(www, "POST", file, 1)) }) + 5
	runBBS(t, bbs(www, "POST", file, 5))
	runBBS(t, bbs(www, "GET", file, rmw.ReadOnlyAfter))
	// The last GET's session ends when the daemon sees its process exit,
	// a moment after its parent did.
	judged := logs.FilterMessageSnippet("judged read-only").FilterField(zap.String("class", "GET"))
	for deadline := time.Now().Add(rmwDeadline); judged.Len() == 0; time.Sleep(10 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "the GETs were never judged read-only (stats %+v)", m.Stats())
		judged = logs.FilterMessageSnippet("judged read-only").FilterField(zap.String("class", "GET"))
	}
	require.Equal(t, 1, judged.Len())

	states := map[string]string{}
	for _, c := range m.srv.Status().Classes {
		states[c.Path+" "+c.Class] = c.State
	}
	assert.Equal(t, map[string]string{"data/bbs.txt POST": "writes", "data/bbs.txt GET": "read-only"}, states, "the status")

	barrier := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(barrier), 0o755))
	require.NoError(t, os.Chmod(barrier, 0o777))
	const views = 16
	ps := make([]Perl, views)
	for i := range ps {
		ps[i] = bbs(www, "GET", file, 1, barrier, strconv.Itoa(views))
	}
	outs := runAll(t, ps)
	assertNoAnomalies(t, outs)
	re := regexp.MustCompile(`(?m)^DONE overlap=(\d+)$`)
	for i, out := range outs {
		k := re.FindStringSubmatch(out)
		require.NotNil(t, k, "view %d: %s", i, out)
		assert.Equal(t, strconv.Itoa(views), k[1], "views that view %d saw overlap with it (stats %+v)", i, m.Stats())
	}
	before := m.Stats()
	assert.GreaterOrEqual(t, before.RMWReadOnly, int64(views), "opens without a session (stats %+v)", before)

	const procs, runs = 8, 10
	ps = ps[:0]
	for range procs {
		ps = append(ps, bbs(www, "POST", file, runs), bbs(www, "GET", file, runs))
	}
	assertNoAnomalies(t, runAll(t, ps))
	require.Equal(t, base+procs*runs, counter(t, readBoth(t, m, "data/bbs.txt")), "posts kept (stats %+v)", m.Stats())
	st := m.Stats()
	assert.GreaterOrEqual(t, st.RMWReadOnly-before.RMWReadOnly, int64(procs*runs), "views without a session (stats %+v)", st)
	requireNoGiveUp(t, m)

	// A GET that writes (its own read took no session): GETs take
	// sessions from then on, and keep every update.
	writer := func(n int) Perl { p := bbs(www, "GET", file, n); p.Env = append(p.Env, "BBS_WRITE=1"); return p }
	runBBS(t, writer(1))
	require.Equal(t, 1, logs.FilterMessageSnippet("judged read-only opened the file for writing").
		FilterField(zap.String("class", "GET")).Len())
	ps = ps[:0]
	for range procs {
		ps = append(ps, writer(runs))
	}
	assertNoAnomalies(t, runAll(t, ps))
	require.Equal(t, base+1+2*procs*runs, counter(t, readBoth(t, m, "data/bbs.txt")), "writing GETs kept (stats %+v)", m.Stats())
	requireNoGiveUp(t, m)
}
