package audit

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/safefs/safefs/fs"
)

func event(i int) fs.CommitEvent {
	return fs.CommitEvent{Time: time.Unix(1700000000, 0), Path: "p" + strconv.Itoa(i), Kind: fs.KindReplace, Bytes: int64(i),
		PID: 42, UID: 33, LockWait: time.Millisecond, Duration: 3 * time.Millisecond, Cmdline: func() string { return "perl x.pl" }}
}

func readLines(t *testing.T, path string) []Line {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []Line
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l Line
		require.NoError(t, json.Unmarshal(sc.Bytes(), &l), "line %q", sc.Text())
		out = append(out, l)
	}
	return out
}

// One line per event, with the fields of the event; a rejection says
// where its bytes went.
func TestLines(t *testing.T) {
	path := t.TempDir() + "/audit"
	w, err := Open(path, zap.NewNop())
	require.NoError(t, err)
	w.Committed(event(1))
	w.Rejected(fs.RejectEvent{CommitEvent: event(2), Reason: fs.ReasonLockTimeout, Err: errors.New("lock wait timed out"), KeptAs: "u33-x"})
	w.Rejected(fs.RejectEvent{CommitEvent: event(3), Reason: fs.ReasonStale, Err: syscall.ESTALE})
	w.Rejected(fs.RejectEvent{CommitEvent: event(4), Reason: fs.ReasonKilled})
	w.Close()
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "it holds command lines")
	got := readLines(t, path)
	require.Len(t, got, 4)
	assert.Equal(t, Line{Time: time.Unix(1700000000, 0).UTC(), Event: "commit", Path: "p1", Kind: "replace", Bytes: 1, PID: 42, UID: 33,
		Cmdline: "perl x.pl", LockWaitUS: 1000, DurationUS: 3000, Result: "committed"}, got[0])
	assert.Equal(t, []string{"reject", "lock_timeout", "lock wait timed out", ".safefs/rejected/u33-x"},
		[]string{got[1].Event, got[1].Result, got[1].Error, got[1].Kept})
	assert.Equal(t, []string{"stale", "dropped"}, []string{got[2].Result, got[2].Kept})
	assert.Equal(t, []string{"killed", ""}, []string{got[3].Result, got[3].Kept})
}

// A trail that cannot keep up drops lines without blocking the caller,
// counts them, and says so in the trail.
func TestDropsWhenBlocked(t *testing.T) {
	r, wp, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	// The trail is the pipe's write end: nobody reads, so the writer
	// blocks once the pipe is full.
	w, err := Open("/proc/self/fd/"+strconv.Itoa(int(wp.Fd())), zap.NewNop())
	require.NoError(t, err)
	wp.Close()
	const n = 4 * QueueLen
	for i := range n {
		w.Committed(event(i)) // must never block
	}
	dropped := w.Dropped()
	require.Positive(t, dropped, "a blocked writer must drop lines")
	done := make(chan []Line)
	go func() {
		var got []Line
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			var l Line
			if json.Unmarshal(sc.Bytes(), &l) == nil {
				got = append(got, l)
			}
		}
		done <- got
	}()
	w.Committed(event(n)) // after the drops: the trail says how many
	w.Close()
	got := <-done
	var commits, said int64
	for _, l := range got {
		switch l.Event {
		case "commit":
			commits++
		case "dropped":
			said += l.Dropped
		}
	}
	assert.Equal(t, w.Dropped(), said, "the trail tells every line it lost")
	assert.Equal(t, int64(n+1), commits+said)
}
