package fs

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A symlink renamed over through the mount still reads through a
// descriptor of it, as on a plain file system: a path walk that resolved
// it just before the rename reads it just after (go-fuse's posixtest
// OpenSymlinkRace got ESTALE from open when that happened twice in a row).
func TestSymlinkGhostReads(t *testing.T) {
	_, _, mnt := mountForTest(t)
	l := filepath.Join(mnt, "l")
	require.NoError(t, os.Symlink("target", l))
	fd, err := unix.Open(l, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	x := filepath.Join(mnt, "x")
	require.NoError(t, os.WriteFile(x, []byte("data"), 0o644))
	require.NoError(t, os.Rename(x, l))
	buf := make([]byte, 64)
	n, err := unix.Readlinkat(fd, "", buf)
	require.NoError(t, err, "readlink of the symlink renamed over")
	assert.Equal(t, "target", string(buf[:max(n, 0)]))
}

// A file removed through the mount leaves no descriptor of it in the
// daemon once the kernel forgot it, so its blocks are freed: also when
// its writer wrote for longer than the name's entry timeout, so that the
// removal looked the name up again first (a ghost was kept for good
// then, holding a big file's disk space until unmount).
func TestRemovedFileFreed(t *testing.T) {
	_, backing, mnt := mountForTest(t)
	p := filepath.Join(mnt, "big")
	f, err := os.Create(p)
	require.NoError(t, err)
	_, err = f.Write(make([]byte, 4096))
	require.NoError(t, err)
	time.Sleep(1200 * time.Millisecond) // past the entry's 1 s
	_, err = f.Write(make([]byte, 4096))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, os.Remove(p))
	assertFreed(t, filepath.Join(backing, "big"))
}

// assertFreed fails t unless the daemon (this process) holds no
// descriptor of the removed backing file path within 3 s, the kernel
// asked to forget what it can meanwhile.
func assertFreed(t *testing.T, path string) {
	gone := path + " (deleted)"
	deadline := time.Now().Add(3 * time.Second)
	for heldOf(t, gone) > 0 && time.Now().Before(deadline) {
		require.NoError(t, os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0))
		time.Sleep(50 * time.Millisecond)
	}
	assert.Zero(t, heldOf(t, gone), "descriptors of the removed file left in the daemon")
}

// A file removed right after a commit gave its name a new node, before
// any open reached that node, is freed too: the daemon keeps it in its
// tables only while an open sent on may still come (it kept it for good).
func TestMovedThenRemovedFreed(t *testing.T) {
	_, backing, mnt := mountForTest(t)
	p := filepath.Join(mnt, "m")
	require.NoError(t, os.WriteFile(p, []byte("one"), 0o644))
	_, err := os.ReadFile(p) // a reader's node: the next commit moves lookups on
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, []byte("two"), 0o644))
	require.NoError(t, os.Remove(p))
	assertFreed(t, filepath.Join(backing, "m"))
}

// A file whose name the kernel looked up again after its entry timeout
// leaves the daemon's tables once the kernel forgets it (the lookup's
// node, which go-fuse dropped for the one it knew, counted for good).
func TestRelookedFileForgotten(t *testing.T) {
	srv, backing, mnt := mountForTest(t)
	p := filepath.Join(mnt, "a")
	require.NoError(t, os.WriteFile(p, []byte("data"), 0o644))
	var st unix.Stat_t
	require.NoError(t, unix.Stat(filepath.Join(backing, "a"), &st))
	time.Sleep(1200 * time.Millisecond) // past the entry's 1 s
	_, err := os.Stat(p)
	require.NoError(t, err)
	k := keyOf(&st)
	require.True(t, srv.r.ids.known(k))
	deadline := time.Now().Add(3 * time.Second)
	for srv.r.ids.known(k) && time.Now().Before(deadline) {
		require.NoError(t, os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0))
		time.Sleep(50 * time.Millisecond)
	}
	assert.False(t, srv.r.ids.known(k), "the file stayed in the tables after the kernel forgot it")
}
