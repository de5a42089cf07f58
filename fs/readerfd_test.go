package fs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A reader's open takes its node's descriptor of the version while the
// name still leads there, and the daemon lets such a descriptor go when
// the name leads elsewhere, when a commit makes it old, and when no
// reader took it for a while (a file deleted in BACKING is not held).
func TestReaderTakesVersionFd(t *testing.T) {
	srv, backing, mnt := mountForTest(t)
	bp, p := filepath.Join(backing, "page"), filepath.Join(mnt, "page")
	read := func(p string) string {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		return string(b)
	}
	require.NoError(t, os.WriteFile(bp, []byte("one"), 0o644))
	for range 5 {
		require.Equal(t, "one", read(p))
	}
	require.GreaterOrEqual(t, srv.r.count.versionFd.Load(), int64(3), "opens that took the node's descriptor")
	one := backingKey(t, bp)
	require.True(t, keptVersion(srv, one))

	tmp := filepath.Join(backing, "page.new")
	require.NoError(t, os.WriteFile(tmp, []byte("two"), 0o644))
	require.NoError(t, os.Rename(tmp, bp))
	require.Equal(t, "two", read(p), "replaced in BACKING, read at once")
	require.Eventually(t, func() bool { return !keptVersion(srv, one) }, 10*time.Second, 50*time.Millisecond,
		"kept after its name led elsewhere")
	two := backingKey(t, bp)
	require.True(t, keptVersion(srv, two))

	// A reader open across the commit: the writer gets a node of its own.
	r, err := os.Open(p)
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	require.NoError(t, os.WriteFile(p, []byte("three"), 0o644))
	require.False(t, keptVersion(srv, two), "kept after a commit")
	require.NoError(t, r.Close())
	require.Equal(t, "three", read(p))

	other := filepath.Join(backing, "other")
	require.NoError(t, os.WriteFile(other, []byte("x"), 0o644))
	require.Equal(t, "x", read(filepath.Join(mnt, "other")))
	require.True(t, keptVersion(srv, backingKey(t, other)))
	require.NoError(t, os.Remove(other))
	require.Eventually(t, func() bool { return heldDeleted(t, backing) == 0 }, 10*time.Second, 50*time.Millisecond,
		"the daemon holds a file deleted in BACKING open")
}

// The daemon keeps at most maxKeptFds such descriptors, whatever the
// files read (the per-user file slots do not count them).
func TestReaderFdsBounded(t *testing.T) {
	srv, backing, mnt := mountForTest(t)
	for i := range maxKeptFds + 40 {
		nm := fmt.Sprintf("f%d", i)
		require.NoError(t, os.WriteFile(filepath.Join(backing, nm), []byte(nm), 0o644))
		b, err := os.ReadFile(filepath.Join(mnt, nm))
		require.NoError(t, err)
		require.Equal(t, nm, string(b))
	}
	kf := &srv.r.readerFds
	kf.mu.Lock()
	kept := len(kf.nodes)
	kf.mu.Unlock()
	require.LessOrEqual(t, kept, maxKeptFds)
	require.Greater(t, kept, 0)
}

func backingKey(t *testing.T, p string) key {
	var st unix.Stat_t
	require.NoError(t, unix.Lstat(p, &st))
	return keyOf(&st)
}

// keptVersion reports whether a node holds a descriptor of version k.
func keptVersion(srv *Server, k key) bool {
	kf := &srv.r.readerFds
	kf.mu.Lock()
	var nodes []*Node
	for n := range kf.nodes {
		nodes = append(nodes, n)
	}
	kf.mu.Unlock()
	for _, n := range nodes {
		n.f.mu.Lock()
		held := n.rl.fd != nil && n.rl.key == k
		n.f.mu.Unlock()
		if held {
			return true
		}
	}
	return false
}

// heldDeleted counts this process's descriptors (the daemon's: the
// mount is served in-process) of deleted files below backing, but for
// the staging pool's nameless files.
func heldDeleted(t *testing.T, backing string) int {
	n := 0
	for _, l := range ownFds(t) {
		staging := strings.HasPrefix(l, filepath.Join(backing, ".safefs")+"/")
		if !staging && strings.HasPrefix(l, backing+"/") && strings.HasSuffix(l, " (deleted)") {
			n++
		}
	}
	return n
}

// Readers open at once share their node's descriptor of the version (no
// descriptor each), keep reading their version after a commit made it
// old, and the last of them to close lets it go.
func TestReadersShareVersionFd(t *testing.T) {
	_, backing, mnt := mountForTest(t)
	bp, p := filepath.Join(backing, "page"), filepath.Join(mnt, "page")
	require.NoError(t, os.WriteFile(bp, []byte("one"), 0o644))
	for range 3 {
		_, err := os.ReadFile(p)
		require.NoError(t, err)
	}
	var rs []*os.File
	t.Cleanup(func() {
		for _, r := range rs {
			r.Close()
		}
	})
	for range 10 {
		r, err := os.Open(p)
		require.NoError(t, err)
		rs = append(rs, r)
	}
	require.LessOrEqual(t, heldOf(t, bp), 2, "descriptors of the version the daemon holds for 10 readers")

	require.NoError(t, os.WriteFile(p, []byte("two, longer"), 0o644))
	buf := make([]byte, 64)
	for i, r := range rs {
		n, err := r.ReadAt(buf, 0)
		require.Equal(t, "one", string(buf[:n]), "reader %d after the commit (%v)", i, err)
	}
	for _, r := range rs {
		require.NoError(t, r.Close())
	}
	rs = nil
	require.Eventually(t, func() bool { return heldDeleted(t, backing) == 0 }, 10*time.Second, 50*time.Millisecond,
		"the old version is held open after its last reader closed")
}
