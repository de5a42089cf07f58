package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sqliteAcks are the commits the workers acknowledged: the values
// committed, and how many each worker acknowledged.
type sqliteAcks struct {
	mu     sync.Mutex
	values map[int]int // value: times acknowledged
	per    []int       // by worker
	max    int
	all    chan struct{} // closed once each worker acknowledged ackEach
}

// ackEach: the daemon is killed once every worker has acknowledged this
// many commits, so that all of them run transactions side by side.
const ackEach = 5

func newSQLiteAcks(workers int) *sqliteAcks {
	return &sqliteAcks{values: map[int]int{}, per: make([]int, workers), all: make(chan struct{})}
}

// line takes worker w's output line l.
func (a *sqliteAcks) line(w int, l string) {
	v, err := strconv.Atoi(strings.TrimPrefix(l, "c "))
	if !strings.HasPrefix(l, "c ") || err != nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.values[v]++
	a.max = max(a.max, v)
	a.per[w]++
	if a.per[w] == ackEach && slices.Min(a.per) >= ackEach {
		close(a.all)
	}
}

var sqliteState = regexp.MustCompile(`\Av=(\d+) integrity=(.*)\n\z`)

// sqliteCheck opens db (through a mount), which recovers it as SQLite
// does, and returns its counter and integrity_check's result.
func sqliteCheck(t *testing.T, py, db string) (int, string) {
	t.Helper()
	out, err := exec.Command(py, filepath.Join("..", "..", "testfs", "python", "sqlite_check.py"), db).CombinedOutput()
	require.NoError(t, err, "%s", out)
	m := sqliteState.FindStringSubmatch(string(out))
	require.NotNil(t, m, "sqlite_check.py printed %q", out)
	v, _ := strconv.Atoi(m[1])
	return v, m[2]
}

// TestSQLiteDaemonKilled: the daemon killed by SIGKILL while 8 processes
// run SQLite transactions (issue 45). No two acknowledged commits wrote
// the same value (none was lost); after recovery and a new mount,
// the database passes integrity_check (SQLite rolls back the hot journal
// or replays its WAL), every commit whose COMMIT returned is in it, and
// at most the one commit in flight besides (BEGIN IMMEDIATE lets one
// writer at a time); then it takes transactions again.
func TestSQLiteDaemonKilled(t *testing.T) {
	requireFuse(t)
	requireRoot(t)
	py := "/usr/bin/python3" // Debian's, with its sqlite3 module
	if _, err := os.Stat(py); err != nil {
		requireTool(t, "python3")
	}
	for _, ms := range [][3]string{{"WAL", "NORMAL", "per"}, {"DELETE", "FULL", "keep"}} {
		t.Run(strings.Join(ms[:], "-"), func(t *testing.T) {
			backing, mnt := tempDir(t), tempDir(t)
			db := filepath.Join(mnt, "counter.db")
			p := startMountWith(t, backing, mnt, "")
			acks := newSQLiteAcks(8)
			var workers []*proc
			for i := range 8 {
				cmd := exec.Command(py, testdataPath(t, "sqlite_ack.py"), db, ms[0], ms[1], ms[2], "100000")
				out := &lineBuffer{onLine: func(l string) { acks.line(i, l) }}
				w := launch(t, cmd, out)
				t.Cleanup(func() { w.reap(t, waitLimit) })
				workers = append(workers, w)
			}
			select {
			case <-acks.all:
			case <-time.After(waitLimit):
				t.Fatalf("not every worker acknowledged %d commits; the first one says:\n%s", ackEach, workers[0].out)
			}
			require.NoError(t, p.cmd.Process.Kill())
			waitKilled(t, p)
			for _, w := range workers {
				w.waitExit(t, waitLimit) // they fail on the dead mount
			}
			unmountIfMounted(t, mnt)
			acks.mu.Lock()
			last := acks.max
			var twice []int
			for v, n := range acks.values {
				if n > 1 {
					twice = append(twice, v)
				}
			}
			acks.mu.Unlock()
			t.Logf("commits acknowledged: %d, the last one %d", len(acks.values), last)
			// Each commit adds one to the last: two that committed one
			// value means an update lost.
			assert.Empty(t, twice, "values committed by two acknowledged transactions")

			s := recoverBacking(t, backing)
			assert.Zero(t, s.Refused, "recovery refused something")
			assertNoDebris(t, backing)

			p = startMountWith(t, backing, mnt, "")
			v, integrity := sqliteCheck(t, py, db)
			assert.Equal(t, "ok", integrity, "integrity_check")
			assert.Contains(t, []int{last, last + 1}, v, "the last acknowledged commit (and at most the one in flight)")
			out, err := exec.Command(py, testdataPath(t, "sqlite_ack.py"), db, ms[0], ms[1], ms[2], "5").CombinedOutput()
			require.NoError(t, err, "%s", out)
			assert.True(t, strings.HasSuffix(string(out), "c "+strconv.Itoa(v+5)+"\nDONE\n"), "after recovery: %s", out)
			stopMount(t, p)
		})
	}
}
