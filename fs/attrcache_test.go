package fs_test

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/safefs/safefs/testfs"
)

// Attributes are cached while every process sees the same ones; a
// commit must end that at once: the size a stat gives right after a
// close() returned is the committed one, never the cached older one.
func TestAttrCacheCommitInvalidates(t *testing.T) {
	m := testfs.New(t)
	p := m.Path("sized")
	require.NoError(t, os.WriteFile(p, []byte("x"), 0o644))
	for i := range 200 {
		for range 3 { // fill the kernel's cache with the current size
			st, err := os.Stat(p)
			require.NoError(t, err)
			require.EqualValues(t, i%7+1, st.Size(), "round %d: before the commit", i)
		}
		next := bytes.Repeat([]byte("y"), (i+1)%7+1)
		require.NoError(t, os.WriteFile(p, next, 0o644))
		st, err := os.Stat(p)
		require.NoError(t, err)
		require.EqualValues(t, len(next), st.Size(), "round %d: stat right after the commit's close", i)
	}
}

// A writer's pending size is its own: another process's stat, while
// the writer has written and not closed, gives the committed size, and
// the writer's fstat its pending one, however often both ask.
func TestAttrCachePendingSizeStaysPrivate(t *testing.T) {
	m := testfs.New(t)
	p := m.Path("pending")
	require.NoError(t, os.WriteFile(p, []byte("12345"), 0o644))
	statOther := func() string { // another process (stat(1)), by name
		out, err := exec.Command("stat", "-c", "%s", p).Output()
		require.NoError(t, err)
		return strings.TrimSpace(string(out))
	}
	for range 3 {
		require.Equal(t, "5", statOther())
	}
	f, err := os.OpenFile(p, os.O_RDWR|os.O_TRUNC, 0)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.Write([]byte("abcdefghijkl"))
	require.NoError(t, err)
	for range 20 {
		fi, err := f.Stat()
		require.NoError(t, err)
		require.EqualValues(t, 12, fi.Size(), "the writer's fstat")
		require.Equal(t, "5", statOther(), "another process sees the writer's pending size")
	}
	require.NoError(t, f.Close())
	require.Equal(t, "12", statOther(), "after the writer's close")
}

// A change made directly in BACKING shows through the mount within the
// attribute TTL (1 s), as on go-fuse's loopback.
func TestAttrCacheBackingChangeShows(t *testing.T) {
	m := testfs.New(t)
	p := m.Path("direct")
	require.NoError(t, os.WriteFile(p, []byte("ab"), 0o644))
	for range 3 {
		st, err := os.Stat(p)
		require.NoError(t, err)
		require.EqualValues(t, 2, st.Size())
	}
	// In place, so the backing inode (the logical file) stays the same.
	require.NoError(t, os.WriteFile(m.BackingPath("direct"), []byte("abcdef"), 0o644))
	var size int64
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		st, err := os.Stat(p)
		require.NoError(t, err)
		if size = st.Size(); size == 6 {
			return
		}
	}
	t.Fatalf("5 s after a change in BACKING the mount still says size %s", strconv.FormatInt(size, 10))
}

// A writer that has not written yet sees the committed attributes; its
// first write must change that for it alone: from then on its fstat
// gives its pending size and another process's stat the committed one.
func TestAttrCacheWriterBeforeAndAfterFirstWrite(t *testing.T) {
	m := testfs.New(t)
	p := m.Path("log")
	require.NoError(t, os.WriteFile(p, []byte("12345"), 0o644))
	statOther := func() string {
		out, err := exec.Command("stat", "-c", "%s", p).Output()
		require.NoError(t, err)
		return strings.TrimSpace(string(out))
	}
	for round := range 20 {
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		require.NoError(t, err)
		// Closed before the unmount if an assertion fails: a descriptor
		// left open would be flushed at exit to a server already gone.
		t.Cleanup(func() { f.Close() })
		committed := int64(5 + 3*round)
		for range 3 { // both views agree: cached for all
			fi, err := f.Stat()
			require.NoError(t, err)
			require.Equal(t, committed, fi.Size(), "round %d: the writer before writing", round)
			require.Equal(t, strconv.FormatInt(committed, 10), statOther(), "round %d", round)
		}
		_, err = f.Write([]byte("abc"))
		require.NoError(t, err)
		for range 3 {
			fi, err := f.Stat()
			require.NoError(t, err)
			require.Equal(t, committed+3, fi.Size(), "round %d: the writer's fstat after its write", round)
			require.Equal(t, strconv.FormatInt(committed, 10), statOther(), "round %d: another process sees pending bytes", round)
		}
		require.NoError(t, f.Close())
		require.Equal(t, strconv.FormatInt(committed+3, 10), statOther(), "round %d: after the close", round)
	}
}
