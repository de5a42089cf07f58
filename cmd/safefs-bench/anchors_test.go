package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/testfs"
)

// TestAnchorDirect: loopback-direct's writes and reads go through its
// daemon (its /dev/fuse reads and writes carry the bytes), not passed
// through to the backing file as go-fuse's loopback may do.
func TestAnchorDirect(t *testing.T) {
	testfs.Available(t)
	tg := anchorTarget(t, directTarget)
	data := bytes.Repeat([]byte("x"), 4<<20)
	p := filepath.Join(tg.dir, "f")
	in, out := daemonIO(t, tg.pid)
	require.NoError(t, os.WriteFile(p, data, 0o644))
	got, err := os.ReadFile(p)
	require.NoError(t, err)
	require.Equal(t, data, got)
	in2, out2 := daemonIO(t, tg.pid)
	assert.GreaterOrEqual(t, in2-in, int64(len(data)), "bytes the daemon read: the writes")
	assert.GreaterOrEqual(t, out2-out, int64(len(data)), "bytes the daemon wrote: the reads")
}

// daemonIO returns the bytes process pid has read and written (rchar,
// wchar: its /dev/fuse traffic among them).
func daemonIO(t *testing.T, pid int) (in, out int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, ": ")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "rchar":
			in = n
		case "wchar":
			out = n
		}
	}
	require.NotZero(t, in)
	return in, out
}

// TestAnchorLocks: loopback-locks holds a flock taken through the mount
// on its backing file (the daemon decides it), the plain loopback in the
// kernel's own table for the mount's inode; and loopback-locks lets it
// go at the release of the open that took it, while another open of the
// file is alive (which go-fuse's passthrough prevents: lockingOpen).
func TestAnchorLocks(t *testing.T) {
	testfs.Available(t)
	for name, want := range map[string]bool{"loopback": false, locksTarget: true} {
		tg := anchorTarget(t, name)
		require.NoError(t, os.WriteFile(filepath.Join(tg.raw, "f"), []byte("1"), 0o644), name)
		f, err := os.OpenFile(filepath.Join(tg.dir, "f"), os.O_RDWR, 0)
		require.NoError(t, err, name)
		require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_EX), name)
		other, err := os.Open(filepath.Join(tg.dir, "f"))
		require.NoError(t, err, name)
		assert.Equal(t, want, backingLocked(t, tg), "%s: backing file locked", name)
		require.NoError(t, f.Close())
		if want {
			// The RELEASE that unlocks comes after close returns.
			assert.Eventually(t, func() bool { return !backingLocked(t, tg) }, 5*time.Second, 10*time.Millisecond,
				"%s: the flock outlived its open's release", name)
		}
		require.NoError(t, other.Close())
	}
}

// backingLocked reports whether tg's backing file f is flocked.
func backingLocked(t *testing.T, tg *target) bool {
	b, err := os.Open(filepath.Join(tg.raw, "f"))
	require.NoError(t, err)
	defer b.Close()
	err = unix.Flock(int(b.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if err == nil {
		require.NoError(t, unix.Flock(int(b.Fd()), unix.LOCK_UN))
		return false
	}
	require.ErrorIs(t, err, unix.EWOULDBLOCK)
	return true
}

// anchorTarget mounts target name for the test and unmounts it in cleanup.
func anchorTarget(t *testing.T, name string) *target {
	tg, err := newTarget(name, t.TempDir(), zap.NewNop())
	require.NoError(t, err, name)
	t.Cleanup(func() {
		assert.NoError(t, tg.close(), name)
		assertNoMount(t, tg.dir)
	})
	return tg
}
