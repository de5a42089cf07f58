// Package magic recognises the files safefs treats apart by their first
// bytes: SQLite databases, served in place (fs's raw files), and gdbm
// databases, which map themselves shared and so are never passed
// through to a reader; and a SQLite database's siblings by their names
// and its locks by the bytes they lock (sqlite.go).
package magic

import (
	"encoding/binary"
	"math/bits"
	"os"

	"golang.org/x/sys/unix"
)

// sqliteHeader begins every SQLite 3 database file.
const sqliteHeader = "SQLite format 3\x00"

// SQLiteMinSize is a database's smallest size: one page of the smallest
// page size.
const SQLiteMinSize = 512

// SQLite reports whether f begins with the SQLite header.
func SQLite(f *os.File) bool {
	var b [len(sqliteHeader)]byte
	m, _ := unix.Pread(int(f.Fd()), b[:], 0)
	return m == len(b) && string(b[:]) == sqliteHeader
}

// GDBM reports whether f starts with a gdbm magic number (either
// byte order): gdbm maps its file shared, and a writer that opens while
// a reader is passed through would map the committed version. A new
// daemon has not seen such a file mapped (fs's ptFile.never) yet.
func GDBM(f *os.File) bool {
	// O_NOATIME: an open that reads nothing leaves atime as it was.
	fd := int(f.Fd())
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return true
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl|unix.O_NOATIME); err != nil {
		return true // cannot look without a trace: no passthrough
	}
	var b [4]byte
	n, _ := unix.Pread(fd, b[:], 0)
	_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl)
	if n < len(b) {
		return false
	}
	v := binary.LittleEndian.Uint32(b[:])
	for _, m := range []uint32{v, bits.ReverseBytes32(v)} {
		if m >= 0x13579acd && m <= 0x13579ad1 { // GDBM_MAGIC32 .. GDBM_NUMSYNC_MAGIC64
			return true
		}
	}
	return false
}
