package testfs

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sqliteProcs x sqliteRuns transactions per cell: 8 processes as in the
// issue, 15 transactions each to keep the matrix short (WAL NORMAL with
// a connection per request kept 2 of 200 before raw files).
const sqliteProcs, sqliteRuns = 8, 15

// SQLiteCell is one cell of the SQLite matrix: a language's binding
// (Lang as in Perl: "" for Perl's DBD::SQLite, "php" for PDO, "python"
// for sqlite3), a journal mode, a synchronous setting, and a connection
// kept open (FastCGI) or opened per request (CGI).
type SQLiteCell struct {
	Lang, Mode, Sync string
	Keep             bool
}

func (c SQLiteCell) name() string {
	lang := c.Lang
	if lang == "" {
		lang = "perl"
	}
	return fmt.Sprintf("%s-%s-%s-%s", lang, c.Mode, c.Sync, c.conn())
}

func (c SQLiteCell) conn() string {
	if c.Keep {
		return "keep"
	}
	return "per"
}

func (c SQLiteCell) script() string {
	switch c.Lang {
	case "php":
		return "sqlite_counter.php"
	case "python":
		return "sqlite_counter.py"
	}
	return "sqlite_counter.pl"
}

// SQLiteCells is the matrix of the SQLite suite: every journal mode and
// synchronous setting, per request and kept open, in Python; WAL NORMAL
// and DELETE FULL in Perl and PHP.
func SQLiteCells() []SQLiteCell {
	var cells []SQLiteCell
	for _, mode := range []string{"DELETE", "TRUNCATE", "PERSIST", "MEMORY", "WAL"} {
		for _, sync := range []string{"FULL", "NORMAL", "OFF"} {
			for _, keep := range []bool{false, true} {
				cells = append(cells, SQLiteCell{"python", mode, sync, keep})
			}
		}
	}
	for _, lang := range []string{"", "php"} {
		for _, ms := range [][2]string{{"WAL", "NORMAL"}, {"DELETE", "FULL"}} {
			for _, keep := range []bool{false, true} {
				cells = append(cells, SQLiteCell{lang, ms[0], ms[1], keep})
			}
		}
	}
	return cells
}

// RunSQLiteCells runs each cell in a subtest: sqliteProcs processes as
// www start together on a database that does not exist yet in dir (so
// they create it together) and run sqliteRuns transactions each; every
// increment must be kept, no transaction may read a value older than
// its process's last write, and the database must pass integrity_check.
func RunSQLiteCells(t *testing.T, www Cred, dir string, cells []SQLiteCell) {
	for _, c := range cells {
		t.Run(c.name(), func(t *testing.T) {
			requireInterpreter(t, c.Lang)
			requireInterpreter(t, "python") // the check
			db := filepath.Join(dir, c.name()+".db")
			ps := make([]Perl, sqliteProcs)
			for i := range ps {
				ps[i] = Perl{Lang: c.Lang, Script: c.script(), As: &www,
					Args: []string{db, c.Mode, c.Sync, c.conn(), strconv.Itoa(sqliteRuns)}}
			}
			outs := runAll(t, ps)
			assertNoAnomalies(t, outs)
			v, integrity := SQLiteCheck(t, &www, db)
			assert.Equal(t, "ok", integrity, "integrity_check")
			assert.Equal(t, sqliteProcs*sqliteRuns, v, "increments kept")
		})
	}
}

var sqliteState = regexp.MustCompile(`\Av=(\d+) integrity=(.*)\n\z`)

// SQLiteCheck opens the counter database db as c (nil: as the test),
// which recovers it as SQLite does (a hot journal is rolled back, a
// write-ahead log replayed), and returns its counter and the result of
// PRAGMA integrity_check.
func SQLiteCheck(t testing.TB, c *Cred, db string) (int, string) {
	t.Helper()
	out, err := Perl{Lang: "python", Script: "sqlite_check.py", Args: []string{db}, As: c}.Run()
	require.NoError(t, err)
	m := sqliteState.FindStringSubmatch(out)
	require.NotNil(t, m, "sqlite_check.py printed %q", out)
	v, _ := strconv.Atoi(m[1])
	return v, m[2]
}
