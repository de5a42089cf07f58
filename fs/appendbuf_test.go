package fs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Small appends are held in memory until close; whatever needs them as a
// file moves them to one first, and each view stays what it was.
func TestAppendBuffered(t *testing.T) {
	srv, backing, mnt := mountForTest(t)
	held := func() int64 { return srv.r.appendBufs.all.Load() }
	p := filepath.Join(mnt, "log")
	require.NoError(t, os.WriteFile(p, []byte("old\n"), 0o644))

	t.Run("read_through_handle", func(t *testing.T) {
		f, err := os.OpenFile(p, os.O_RDWR|os.O_APPEND, 0)
		require.NoError(t, err)
		defer f.Close()
		_, err = f.WriteString("one\n")
		require.NoError(t, err)
		assert.EqualValues(t, 4, held(), "a 4-byte append was not kept in memory")
		got, err := os.ReadFile(p)
		require.NoError(t, err)
		assert.Equal(t, "old\n", string(got), "a new reader saw pending bytes")
		buf := make([]byte, 64)
		n, _ := f.ReadAt(buf, 0)
		assert.Equal(t, "old\none\n", string(buf[:n]), "the appender reads the file then its pending bytes")
		assert.Zero(t, held(), "read without moving the bytes to a staging file")
		_, err = f.WriteString("two\n")
		require.NoError(t, err)
		require.NoError(t, f.Close())
		requireFile(t, backing, "old\none\ntwo\n")
	})

	t.Run("fstat_through_handle", func(t *testing.T) {
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		require.NoError(t, err)
		defer f.Close()
		_, err = f.WriteString("three\n")
		require.NoError(t, err)
		fi, err := f.Stat()
		require.NoError(t, err)
		assert.EqualValues(t, len("old\none\ntwo\nthree\n"), fi.Size(), "the appender's fstat shows its pending size")
		require.NoError(t, f.Close())
		requireFile(t, backing, "old\none\ntwo\nthree\n")
	})

	t.Run("ftruncate", func(t *testing.T) {
		f := appender(t, p, "old\n", "x\n")
		require.NoError(t, f.Truncate(5), "ftruncate on O_APPEND acts on the whole file")
		_, err := f.WriteString("y")
		require.NoError(t, err)
		require.NoError(t, f.Close())
		requireFile(t, backing, "old\nxy")
	})

	t.Run("beyond_the_buffer", func(t *testing.T) {
		f := appender(t, p, "", "")
		var want bytes.Buffer
		for i := range 3 * appendBufMax / 100 {
			line := strings.Repeat(string(rune('a'+i%26)), 99) + "\n"
			want.WriteString(line)
			_, err := f.WriteString(line)
			require.NoError(t, err)
		}
		assert.Zero(t, held(), "past appendBufMax the bytes stay in memory")
		require.NoError(t, f.Close())
		requireFile(t, backing, want.String())
	})

	t.Run("rejected", func(t *testing.T) {
		f := appender(t, p, "old\n", "kept\n")
		// Swapped directly in BACKING: the commit must not go there.
		other := filepath.Join(backing, "other")
		require.NoError(t, os.WriteFile(other, []byte("someone else's\n"), 0o644))
		require.NoError(t, os.Rename(other, filepath.Join(backing, "log")))
		err := f.Close()
		require.True(t, errors.Is(err, syscall.ESTALE), "close: %v, want ESTALE", err)
		requireFile(t, backing, "someone else's\n")
		ents, err := os.ReadDir(filepath.Join(backing, InternalDir, "rejected"))
		require.NoError(t, err)
		require.Len(t, ents, 1, "the refused append is not in rejected/")
		b, err := os.ReadFile(filepath.Join(backing, InternalDir, "rejected", ents[0].Name()))
		require.NoError(t, err)
		assert.Equal(t, "kept\n", string(b))
		assert.Zero(t, held())
	})
}

// appender makes p hold old, opens it O_WRONLY|O_APPEND and appends
// first (if any) through it; the test closes it.
func appender(t *testing.T, p, old, first string) *os.File {
	t.Helper()
	require.NoError(t, os.WriteFile(p, []byte(old), 0o644))
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	if first != "" {
		_, err = f.WriteString(first)
		require.NoError(t, err)
	}
	return f
}

func requireFile(t *testing.T, backing, want string) {
	t.Helper()
	requireContent(t, backing, "log", []byte(want))
}
