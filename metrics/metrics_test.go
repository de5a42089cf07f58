package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/journal"
)

type fakeSource struct {
	st fs.Stats
	g  fs.Gauges
}

func (f fakeSource) Stats() fs.Stats   { return f.st }
func (f fakeSource) Gauges() fs.Gauges { return f.g }

func scrapeText(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	require.Equal(t, 200, rec.Code)
	b, err := io.ReadAll(rec.Body)
	require.NoError(t, err)
	return string(b)
}

// Events are counted by kind and reason, a killed writer apart; levels
// and fs's own counters are read from the source at scrape.
func TestCounts(t *testing.T) {
	m := New()
	before := scrapeText(t, m)
	assert.Contains(t, before, "\nsafefs_open_handles 0\n", "no source yet: zero")
	m.Recovered(journal.Summary{Records: 3, Completed: 1, RolledBack: 2})
	ev := fs.CommitEvent{LockWait: 2 * time.Second, Duration: 3 * time.Second}
	for _, k := range []string{fs.KindReplace, fs.KindReplace, fs.KindAppend} {
		ev.Kind = k
		m.Committed(ev)
	}
	m.Rejected(fs.RejectEvent{CommitEvent: ev, Reason: fs.ReasonQueueFull})
	m.Rejected(fs.RejectEvent{Reason: fs.ReasonKilled})
	m.SetSource(fakeSource{st: fs.Stats{Dropped: 4, TooManyFiles: 5, NoSpace: 6},
		g: fs.Gauges{OpenHandles: 7, PendingBytes: 8, RejectedFiles: 9, RejectedBytes: 10, KnownFiles: 11}})
	text := scrapeText(t, m)
	for _, want := range []string{
		`safefs_commits_total{kind="replace"} 2`, `safefs_commits_total{kind="append"} 1`,
		`safefs_rejected_total{reason="queue_full"} 1`, `safefs_killed_writers_total 1`,
		`safefs_recovery{result="records"} 3`, `safefs_recovery{result="rolled_back"} 2`,
		`safefs_rejected_dropped_total 4`, `safefs_too_many_files_total 5`, `safefs_no_space_total 6`,
		`safefs_open_handles 7`, `safefs_pending_bytes 8`, `safefs_rejected_files 9`, `safefs_rejected_bytes 10`,
		`safefs_known_files 11`,
		`safefs_lock_wait_seconds_count 4`, `safefs_lock_wait_seconds_bucket{le="1"} 0`,
		`safefs_commit_duration_seconds_count 3`, `safefs_commit_duration_seconds_bucket{le="5"} 3`,
	} {
		assert.Contains(t, text, "\n"+want+"\n")
	}
	assert.NotContains(t, text, `reason="killed"`, "a killed writer is not a rejected commit")
	assert.True(t, strings.Contains(text, "go_goroutines"), "runtime metrics are served too")
}
