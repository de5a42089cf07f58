package magic

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func open(t *testing.T, content []byte) *os.File {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(p, content, 0o644))
	f, err := os.Open(p)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

func TestSQLite(t *testing.T) {
	db := append([]byte(sqliteHeader), make([]byte, SQLiteMinSize)...)
	assert.True(t, SQLite(open(t, db)))
	assert.False(t, SQLite(open(t, db[:10])), "cut")
	assert.False(t, SQLite(open(t, []byte("SQLite format 2\x00........"))))
	assert.False(t, SQLite(open(t, nil)))
}

// Every gdbm magic number is seen in either byte order; the look leaves
// the descriptor's flags as they were.
func TestGDBM(t *testing.T) {
	for _, m := range []uint32{0x13579acd, 0x13579ad1} {
		le := binary.LittleEndian.AppendUint32(nil, m)
		be := binary.BigEndian.AppendUint32(nil, m)
		assert.True(t, GDBM(open(t, append(le, 0, 0))), "%#x little-endian", m)
		assert.True(t, GDBM(open(t, be)), "%#x big-endian", m)
	}
	assert.False(t, GDBM(open(t, binary.LittleEndian.AppendUint32(nil, 0x13579acc))))
	assert.False(t, GDBM(open(t, []byte{0xcd, 0x9a})), "short")
	f := open(t, []byte("plain text"))
	before, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	require.NoError(t, err)
	assert.False(t, GDBM(f))
	after, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	require.NoError(t, err)
	assert.Equal(t, before, after)
}
