package fs_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
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
	statOther := func() string { return sizeByOther(t, p) }
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
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(50 * time.Millisecond) { // a hang guard: the TTL is 1 s
		st, err := os.Stat(p)
		require.NoError(t, err)
		if size = st.Size(); size == 6 {
			return
		}
	}
	t.Fatalf("a minute after a change in BACKING the mount still says size %s", strconv.FormatInt(size, 10))
}

// A writer that has not written yet sees the committed attributes; its
// first write must change that for it alone: from then on its fstat
// gives its pending size and another process's stat the committed one.
func TestAttrCacheWriterBeforeAndAfterFirstWrite(t *testing.T) {
	m := testfs.New(t)
	p := m.Path("log")
	require.NoError(t, os.WriteFile(p, []byte("12345"), 0o644))
	statOther := func() string { return sizeByOther(t, p) }
	for round := range 20 {
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		require.NoError(t, err)
		// Closed before the unmount if an assertion fails: a descriptor
		// left open would be flushed at exit to a server already gone.
		t.Cleanup(func() { f.Close() })
		committed := int64(5 + 3*round)
		// Before writing, both views agree: cached for all.
		requireViews(t, f, p, committed, committed, fmt.Sprintf("round %d: before writing", round))
		_, err = f.Write([]byte("abc"))
		require.NoError(t, err)
		requireViews(t, f, p, committed+3, committed, fmt.Sprintf("round %d: after writing", round))
		require.NoError(t, f.Close())
		require.Equal(t, strconv.FormatInt(committed+3, 10), statOther(), "round %d: after the close", round)
	}
}

// A commit after a write(2) leaves the kernel's cache to the kernel (it
// dropped the size at the write); one without a write(2) still drops it
// itself. Either way a stat right after close() gives the committed size,
// whatever was cached before: appends, and commits of a truncation alone.
func TestAttrCacheCommitKinds(t *testing.T) {
	m := testfs.New(t)
	p := m.Path("kinds")
	require.NoError(t, os.WriteFile(p, []byte("0123456789"), 0o644))
	size := int64(10)
	fill := func(round int, what string) {
		for range 3 { // cached: no writer is open
			st, err := os.Stat(p)
			require.NoError(t, err)
			require.Equal(t, size, st.Size(), "round %d: before %s", round, what)
		}
	}
	for round := range 60 {
		fill(round, "the open")
		f, err := os.OpenFile(p, os.O_RDWR|os.O_APPEND, 0)
		require.NoError(t, err)
		t.Cleanup(func() { f.Close() })
		if round%2 == 0 {
			_, err = f.Write([]byte("abc"))
			require.NoError(t, err)
			size += 3
		} else {
			require.NoError(t, f.Truncate(size-2))
			size -= 2
		}
		require.NoError(t, f.Close())
		st, err := os.Stat(p)
		require.NoError(t, err)
		require.Equal(t, size, st.Size(), "round %d: stat right after the commit's close", round)
	}
}

// A shared map's changes reach the daemon as page-cache writes, not as
// write(2)s: a stat right after the commit's close still shows the new
// time (a map cannot change the size). The map is made by a helper
// process: a process that serves the mount must not map its files.
func TestAttrCacheMappedCommit(t *testing.T) {
	v := mmVersion('a', mmPage)
	_, p := mmSetup(t, v)
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	for round := range 5 {
		require.NoError(t, os.Chtimes(p, old, old))
		for range 3 { // cached: no writer is open
			st, err := os.Stat(p)
			require.NoError(t, err)
			require.True(t, st.ModTime().Equal(old), "round %d: before the map", round)
		}
		w := mmStartSession(t, p)
		w.do(t, "open rw", fmt.Sprint("map ", len(v)), "fill "+string(rune('b'+round)), "munmap", "close")
		st, err := os.Stat(p)
		require.NoError(t, err)
		require.True(t, st.ModTime().After(old), "round %d: stat right after the commit still has the time before the map", round)
	}
}

// A writer whose close() left nothing pending lets attributes be cached
// while its handle lives on (here through a dup'ed descriptor); when it
// writes again, its fstat gives its pending size and another process's
// stat the committed one, until its last close commits.
func TestAttrCacheSettledWriterWritesAgain(t *testing.T) {
	m := testfs.New(t)
	p := m.Path("settled")
	require.NoError(t, os.WriteFile(p, []byte("12345"), 0o644))
	statOther := func() string { return sizeByOther(t, p) }
	size := 5
	for round := range 10 {
		f, err := os.OpenFile(p, os.O_RDWR|os.O_APPEND, 0)
		require.NoError(t, err)
		t.Cleanup(func() { f.Close() })
		fd, err := syscall.Dup(int(f.Fd()))
		require.NoError(t, err)
		dup := os.NewFile(uintptr(fd), p)
		t.Cleanup(func() { dup.Close() })
		_, err = f.Write([]byte("abc"))
		require.NoError(t, err)
		require.NoError(t, f.Close()) // commits; dup keeps the handle
		size += 3
		for range 3 { // may be cached now
			require.Equal(t, strconv.Itoa(size), statOther(), "round %d: after the first close", round)
		}
		_, err = dup.Write([]byte("de"))
		require.NoError(t, err)
		requireViews(t, dup, p, int64(size+2), int64(size), fmt.Sprintf("round %d: after writing again", round))
		require.NoError(t, dup.Close())
		size += 2
		require.Equal(t, strconv.Itoa(size), statOther(), "round %d: after the last close", round)
	}
}

// sizeByOther is the size another process (stat(1)) sees at p, by name.
func sizeByOther(t *testing.T, p string) string {
	t.Helper()
	out, err := exec.Command("stat", "-c", "%s", p).Output()
	require.NoError(t, err)
	return strings.TrimSpace(string(out))
}

// requireViews checks three times that the writer w's fstat gives own and
// another process's stat of p gives others.
func requireViews(t *testing.T, w *os.File, p string, own, others int64, what string) {
	t.Helper()
	for range 3 {
		fi, err := w.Stat()
		require.NoError(t, err)
		require.Equal(t, own, fi.Size(), "%s: the writer's fstat", what)
		require.Equal(t, strconv.FormatInt(others, 10), sizeByOther(t, p), "%s: another process's stat", what)
	}
}
