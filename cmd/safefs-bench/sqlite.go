package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// The sqlite-wal workload: sqliteProcs processes each run
// sqliteRuns transactions on one SQLite database in WAL mode with
// synchronous=NORMAL, each BEGIN IMMEDIATE, read a counter, write it
// plus one, COMMIT, on a connection kept open (a FastCGI process's);
// the count must be exact. On safefs the database, its WAL and its
// shared-memory index are raw files (fs/rawfile.go), served in place.
const (
	python = "/usr/bin/python3" // Debian's, with its sqlite3 module

	sqliteSetupPy = `
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("PRAGMA journal_mode=WAL").fetchall()
c.execute("CREATE TABLE t(v INTEGER)")
c.execute("INSERT INTO t VALUES(0)")
c.close()
`
	sqliteWALPy = `
import sqlite3, sys, time
path, n = sys.argv[1], int(sys.argv[2])
c = sqlite3.connect(path, timeout=60, isolation_level=None)
c.execute("PRAGMA journal_mode=WAL").fetchall()
c.execute("PRAGMA synchronous=NORMAL")
done = 0
while done < n:
    try:
        c.execute("BEGIN IMMEDIATE")
        v = c.execute("SELECT v FROM t").fetchone()[0]
        c.execute("UPDATE t SET v=?", (v + 1,))
        c.execute("COMMIT")
        done += 1
    except sqlite3.OperationalError as e:
        if "locked" not in str(e) and "busy" not in str(e):
            raise
        if c.in_transaction:
            c.execute("ROLLBACK")
        time.sleep(0.001)
`
	sqliteCountPy = `
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
print(c.execute("SELECT v FROM t").fetchone()[0], c.execute("PRAGMA integrity_check").fetchone()[0])
`
)

// sqliteSetup makes the database in the backing directory (untimed).
func sqliteSetup(e *env) error {
	if _, err := exec.LookPath(python); err != nil {
		return fmt.Errorf("python3 not installed: %w", err)
	}
	return runPython(e, sqliteSetupPy, filepath.Join(e.raw, "counter.db"))
}

// sqliteRun runs the processes at once, checks that the count is exact
// and the database whole, and returns the transactions made.
func sqliteRun(e *env) (float64, error) {
	db := e.path("counter.db")
	args := []string{"-c", sqliteWALPy, db, strconv.Itoa(e.cfg.sqliteRuns)}
	if err := runProcs(e, "sqlite", e.cfg.sqliteProcs, python, args...); err != nil {
		return 0, err
	}
	out, err := exec.CommandContext(e.ctx, python, "-c", sqliteCountPy, db).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("count: %w: %s", err, out)
	}
	f := strings.Fields(string(out))
	n, err := strconv.Atoi(f[0])
	if err != nil || len(f) != 2 || f[1] != "ok" {
		return 0, fmt.Errorf("count: %q", out)
	}
	want := e.cfg.sqliteProcs * e.cfg.sqliteRuns
	if n < want {
		return 0, lostError{want - n}
	}
	if n > want {
		return 0, fmt.Errorf("%s holds %d, more than the %d transactions made", db, n, want)
	}
	return float64(want), nil
}

func runPython(e *env, prog string, args ...string) error {
	out, err := exec.CommandContext(e.ctx, python, append([]string{"-c", prog}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}
