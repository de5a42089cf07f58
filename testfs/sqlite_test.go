package testfs

import (
	"crypto/md5"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSQLitePlainDir proves the SQLite scripts: on a plain directory
// each language's counter keeps every increment (WAL NORMAL and DELETE
// FULL, per request and kept open).
func TestSQLitePlainDir(t *testing.T) {
	www := LookupUser(t, "www-data")
	dir := filepath.Join(PlainDir(t), "data")
	wwwDir(t, &www, dir)
	var cells []SQLiteCell
	for _, c := range SQLiteCells() {
		if c.Mode == "WAL" && c.Sync == "NORMAL" || c.Mode == "DELETE" && c.Sync == "FULL" {
			cells = append(cells, c)
		}
	}
	RunSQLiteCells(t, www, dir, cells)
}

// TestContractSQLite: SQLite databases in the data directory come out
// exactly as SQLite wrote them: 8 processes that create a
// database together and run transactions on it (BEGIN IMMEDIATE, read,
// write, COMMIT) keep every increment, in every journal mode and
// synchronous setting, with a connection per request and kept open,
// in Python, Perl and PHP; integrity_check is ok after.
func TestContractSQLite(t *testing.T) {
	t.Parallel() // heavy: see the package doc
	_, www, dir := setup(t)
	RunSQLiteCells(t, www, dir, SQLiteCells())
}

// TestContractSQLiteKilledWriter: a writer killed by SIGKILL in the
// middle of a transaction, after SQLite wrote pages before the commit,
// leaves the files as SQLite wrote them: those pages in the database
// (rollback journal modes) or in the write-ahead log, and the database's
// own recovery data (a hot journal), and the next connection
// recovers the database to its last commit: the killed transaction is
// not in it, integrity_check is ok. (Killed writers do not commit, as
// for any file, but here SQLite's journal is what undoes them.)
func TestContractSQLiteKilledWriter(t *testing.T) {
	requireInterpreter(t, "python")
	m, www, _ := setup(t)
	for _, mode := range []string{"DELETE", "TRUNCATE", "PERSIST", "WAL"} {
		t.Run(mode, func(t *testing.T) {
			db := m.Path("data", mode+".db")
			run := func(op string) (string, error) {
				return Perl{Lang: "python", Script: "sqlite_killed.py", Args: []string{db, mode, op}, As: &www}.Run()
			}
			_, err := run("setup")
			require.NoError(t, err)
			before, err := run("check")
			require.NoError(t, err)
			require.Contains(t, before, "v=0 ")
			require.Contains(t, before, " integrity=ok")

			recovery, magic := db+"-journal", []byte{0xd9, 0xd5, 0x05, 0xf9, 0x20, 0xa1, 0x63, 0xd7}
			if mode == "WAL" {
				recovery, magic = db+"-wal", []byte{0x37, 0x7f, 0x06}
			}
			recovery = m.BackingPath("data", filepath.Base(recovery))
			for range 3 {
				dbBefore, err := os.ReadFile(m.BackingPath("data", mode+".db"))
				require.NoError(t, err)
				out, err := run("kill")
				var exit *exec.ExitError
				require.ErrorAs(t, err, &exit, "the script kills itself: %s", out)
				require.Equal(t, syscall.SIGKILL, exit.Sys().(syscall.WaitStatus).Signal(), "killed by SIGKILL: %s", out)
				require.Equal(t, "spilled\n", out)
				b, err := os.ReadFile(recovery)
				require.NoError(t, err, "the killed writer's recovery data in BACKING")
				require.Greater(t, len(b), 4096, "the killed writer's recovery data in BACKING")
				require.Equal(t, magic, b[:len(magic)], "its header")
				if mode != "WAL" {
					dbAfter, err := os.ReadFile(m.BackingPath("data", mode+".db"))
					require.NoError(t, err)
					require.NotEqual(t, md5.Sum(dbBefore), md5.Sum(dbAfter), "pages SQLite wrote to the database before the commit are in it")
				}
			}
			after, err := run("check")
			require.NoError(t, err)
			assert.Equal(t, before, after, "the database at its last commit")
		})
	}
}
