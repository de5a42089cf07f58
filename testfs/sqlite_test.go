package testfs

import (
	"path/filepath"
	"testing"
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
// exactly as SQLite wrote them (issue 45): 8 processes that create a
// database together and run transactions on it (BEGIN IMMEDIATE, read,
// write, COMMIT) keep every increment, in every journal mode and
// synchronous setting, with a connection per request and kept open,
// in Python, Perl and PHP; integrity_check is ok after.
func TestContractSQLite(t *testing.T) {
	t.Parallel() // heavy: see the package doc
	_, www, dir := setup(t)
	RunSQLiteCells(t, www, dir, SQLiteCells())
}
