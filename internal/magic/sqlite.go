package magic

import "strings"

// A SQLite database's siblings and its locks are recognised too: fs
// serves all of a database's files raw (docs/sqlite.md).

// sqliteSuffixes are the names SQLite gives a database's siblings: its
// rollback journal, its write-ahead log and the log's shared index.
var sqliteSuffixes = []string{"-journal", "-wal", "-shm"}

// SQLiteSibling returns the name of the database whose sibling nm would
// be (nm with a SQLite suffix cut off); ok is false for any other name.
func SQLiteSibling(nm string) (db string, ok bool) {
	for _, s := range sqliteSuffixes {
		if base, ok := strings.CutSuffix(nm, s); ok && base != "" {
			return base, true
		}
	}
	return "", false
}

// SQLite's lock bytes (os_unix.c): the database's PENDING_BYTE, then
// RESERVED_BYTE and the 510 bytes of the SHARED range; the -shm file's
// eight WAL locks from byte 120 and its DMS byte (128).
const (
	sqlitePending = 0x40000000
	sqliteLockEnd = sqlitePending + 2 + 510
	shmLockFirst  = 120
	shmLockLast   = 128
)

// SQLiteLock reports whether a lock of bytes start..end is at SQLite's
// lock bytes of a database, or of a -shm file (shm tells whether the
// file is one; asked only for a lock in the -shm file's range).
func SQLiteLock(start, end uint64, shm func() bool) bool {
	if start >= sqlitePending && start < sqliteLockEnd {
		return true
	}
	if start < shmLockFirst || end > shmLockLast {
		return false
	}
	return shm()
}
