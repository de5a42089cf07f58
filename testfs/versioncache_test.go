package testfs

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	safefs "github.com/safefs/safefs/fs"
)

func versionCache(o *safefs.Options) { o.VersionCache = true }

func version(b byte, size int) []byte { return bytes.Repeat([]byte{b}, size) }

func readAllAt(t *testing.T, f *os.File) []byte {
	t.Helper()
	b, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<40))
	require.NoError(t, err)
	return b
}

// A reader alone on a version reads it through the page cache (the
// kernel caches its pages; with direct I/O it caches none), keeps it
// whole across a commit, and the next opener reads the new version. A
// writer that opens while the reader holds it open is moved to another
// kernel inode; both show the file's one inode number.
func TestVersionCacheReaders(t *testing.T) {
	m := New(t, versionCache)
	p := m.Path("page")
	const size = 1 << 20
	require.NoError(t, os.WriteFile(m.BackingPath("page"), version('a', size), 0o644)) // a data file made outside

	r1, err := os.Open(p)
	require.NoError(t, err)
	defer r1.Close()
	require.Equal(t, version('a', size), readAllAt(t, r1))
	RequireCached(t, p)

	w, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	require.NoError(t, err, "a writer while a reader holds the version")
	_, err = w.Write(version('b', size/2))
	require.NoError(t, err)
	var rs, ws unix.Stat_t
	require.NoError(t, unix.Fstat(int(r1.Fd()), &rs))
	require.NoError(t, unix.Fstat(int(w.Fd()), &ws))
	assert.Equal(t, rs.Ino, ws.Ino, "one inode number for the file")
	assert.Equal(t, int64(size), rs.Size, "the reader's size")
	assert.Equal(t, int64(size/2), ws.Size, "the writer's size")
	require.NoError(t, w.Close())

	assert.Equal(t, version('a', size), readAllAt(t, r1), "the reader's version after the commit")
	r2, err := os.Open(p)
	require.NoError(t, err)
	defer r2.Close()
	assert.Equal(t, version('b', size/2), readAllAt(t, r2), "a new reader's version")
	got, err := os.ReadFile(m.BackingPath("page"))
	require.NoError(t, err)
	assert.Equal(t, version('b', size/2), got, "backing")
}

// Appends and rewrites by other processes while a cached reader is
// open: a new read of the reader sees the appended bytes (they were
// written into its version's file), and a stat by name sees each commit.
func TestVersionCacheAppendsSeen(t *testing.T) {
	m := New(t, versionCache)
	p := m.Path("log")
	require.NoError(t, os.WriteFile(m.BackingPath("log"), []byte("one\n"), 0o644))
	r, err := os.Open(p)
	require.NoError(t, err)
	defer r.Close()
	require.Equal(t, "one\n", string(readAllAt(t, r)))
	RequireCached(t, p)
	for i, line := range []string{"two\n", "three\n"} {
		out, err := exec.Command("perl", "-e", `open(F, ">>", $ARGV[0]) or die "$!"; print F $ARGV[1]; close(F) or die "$!"`, p, line).CombinedOutput()
		require.NoError(t, err, "%s", out)
		want := "one\ntwo\n"
		if i == 1 {
			want += "three\n"
		}
		assert.Equal(t, want, string(readAllAt(t, r)), "the reader after append %d", i+1)
		st, err := os.Stat(p)
		require.NoError(t, err)
		assert.Equal(t, int64(len(want)), st.Size(), "stat after append %d", i+1)
	}
	require.NoError(t, os.WriteFile(p, []byte("new\n"), 0o644))
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, "new\n", string(b), "a new open after a rewrite")
	assert.Equal(t, "one\ntwo\nthree\n", string(readAllAt(t, r)), "the reader's version after the rewrite")
}

// With passthrough=read, a reader node of a large version is served
// from that version's backing file: the open is passed through, the
// reader keeps its version (read and map) across a rewrite, and the
// writer that came meanwhile got a node of its own. An append while a
// passed-through reader holds the committed file replaces it (the
// reader keeps its version whole), and the file's later readers read
// through the page cache, where appends are written in place.
func TestVersionCachePassthrough(t *testing.T) {
	requirePassthrough(t)
	m := New(t, func(o *safefs.Options) { o.VersionCache, o.Passthrough = true, true })
	p := m.Path("big")
	const size = 2 << 20
	require.NoError(t, os.WriteFile(m.BackingPath("big"), version('a', size), 0o644))

	r1, err := os.Open(p)
	require.NoError(t, err)
	defer r1.Close()
	require.Equal(t, int64(1), m.Stats().Passthrough, "the reader was passed through")
	mapped, err := unix.Mmap(int(r1.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	require.NoError(t, err)
	defer unix.Munmap(mapped)
	sameBytes(t, version('a', size), readAllAt(t, r1), "the first read")

	require.NoError(t, os.WriteFile(p, version('b', size+1), 0o644), "a writer while the reader is passed through")
	sameBytes(t, version('a', size), readAllAt(t, r1), "the reader's version after the commit")
	sameBytes(t, version('a', size), mapped, "the reader's map after the commit")

	r2, err := os.Open(p)
	require.NoError(t, err)
	defer r2.Close()
	sameBytes(t, version('b', size+1), readAllAt(t, r2), "a new reader's version")
	assert.Equal(t, int64(2), m.Stats().Passthrough, "the new reader was passed through")

	out, err := exec.Command("perl", "-e", `open(F, ">>", $ARGV[0]) or die "$!"; print F "tail\n"; close(F) or die "$!"`, p).CombinedOutput()
	require.NoError(t, err, "%s", out)
	sameBytes(t, version('b', size+1), readAllAt(t, r2), "a passed-through reader across an append")
	want := append(version('b', size+1), "tail\n"...)
	// The appender's node is direct; a reader is sent on from it once
	// it has been idle for readerMoveAfter (1 s): not at once, the file
	// is not passed through any more.
	time.Sleep(1100 * time.Millisecond)
	r3, err := os.Open(p)
	require.NoError(t, err)
	defer r3.Close()
	sameBytes(t, want, readAllAt(t, r3), "a reader after the append")
	assert.Equal(t, int64(2), m.Stats().Passthrough, "a file appended to was passed through")
	RequireCached(t, p)
	got, err := os.ReadFile(m.BackingPath("big"))
	require.NoError(t, err)
	sameBytes(t, want, got, "backing")
}

// TestVersionCachePassthroughRewriteWhileReading: the contract's
// rewriters and readers (8 and 8 Perl processes) on 1.5 MiB versions,
// which readers read passed through: every read is one whole version.
func TestVersionCachePassthroughRewriteWhileReading(t *testing.T) {
	requirePassthrough(t)
	m, www, _ := setup(t, func(o *safefs.Options) { o.VersionCache, o.Passthrough = true, true })
	rewriteWhileReading(t, m, &www, 384)
	assert.Positive(t, m.Stats().Passthrough, "reads passed through")
}

// sameBytes compares large contents by length and first difference.
func sameBytes(t *testing.T, want, got []byte, what string) {
	t.Helper()
	if bytes.Equal(want, got) {
		return
	}
	i := 0
	for i < min(len(want), len(got)) && want[i] == got[i] {
		i++
	}
	t.Errorf("%s: %d bytes, want %d; first difference at %d", what, len(got), len(want), i)
}

// requirePassthrough skips unless the test runs as root (FUSE
// passthrough needs CAP_SYS_ADMIN); under CI it fails.
func requirePassthrough(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal("passthrough needs root, and CI is set")
	}
	t.Skip("passthrough needs root (CAP_SYS_ADMIN)")
}
