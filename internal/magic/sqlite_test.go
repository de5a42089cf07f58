package magic

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSQLiteSibling(t *testing.T) {
	for nm, db := range map[string]string{
		"a.db-journal": "a.db", "a.db-wal": "a.db", "a.db-shm": "a.db", "x-wal-shm": "x-wal",
		"-journal": "", "-wal": "", "a.db": "", "a.db-journal.bak": "", "a.db-WAL": "",
	} {
		got, ok := SQLiteSibling(nm)
		assert.Equal(t, db, got, nm)
		assert.Equal(t, db != "", ok, nm)
	}
}

func TestSQLiteLock(t *testing.T) {
	shm := func() bool { return true }
	plain := func() bool { return false }
	for _, c := range []struct {
		start, end uint64
		shm        func() bool
		want       bool
	}{
		{0x40000000, 0x40000000, plain, true},                      // PENDING_BYTE
		{0x40000001, 0x40000001, plain, true},                      // RESERVED_BYTE
		{0x40000002, 0x40000002 + 509, plain, true},                // SHARED range
		{0x40000000 + 2 + 510, 0x40000000 + 2 + 510, plain, false}, // past it
		{0x3fffffff, 0x3fffffff, plain, false},
		{120, 120, shm, true}, // a WAL lock
		{128, 128, shm, true}, // DMS
		{120, 128, plain, false},
		{119, 119, shm, false},
		{120, 129, shm, false},
		{0, 0, shm, false},
	} {
		assert.Equal(t, c.want, SQLiteLock(c.start, c.end, c.shm), "%d-%d", c.start, c.end)
	}
}
