package fs

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A big write's staging file is written back while the writer goes on:
// its dirty pages fall below what was written before the close (without
// write-behind they stay dirty for the kernel's 30 s), and the commit
// publishes every byte.
func TestWriteBehind(t *testing.T) {
	_, _, mnt := mountForTest(t, func(o *Options) { o.Durable = false })
	p := filepath.Join(mnt, "big")
	f, err := os.Create(p)
	require.NoError(t, err)
	defer f.Close()
	chunk := bytes.Repeat([]byte("w"), 1<<20)
	const size = 4 * wbChunk
	for n := 0; n < size; n += len(chunk) {
		_, err := f.Write(chunk)
		require.NoError(t, err)
	}
	stage := stagingFile(t, size)
	defer stage.Close()
	assert.Eventually(t, func() bool { return dirtyBytes(t, stage) < size/2 }, 10*time.Second, 20*time.Millisecond,
		"staging file still %d bytes dirty of %d", dirtyBytes(t, stage), size)
	require.NoError(t, f.Close())
	st, err := os.Stat(p)
	require.NoError(t, err)
	assert.EqualValues(t, size, st.Size())
}

// stagingFile opens the staging file of size bytes that this process (the
// daemon, in tests) holds.
func stagingFile(t *testing.T, size int64) *os.File {
	for fd, l := range ownFds(t) {
		if !strings.Contains(l, "/staging/") {
			continue
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Size == size {
			f, err := os.Open("/proc/self/fd/" + strconv.Itoa(fd))
			require.NoError(t, err)
			return f
		}
	}
	t.Fatalf("no staging file of %d bytes open", size)
	return nil
}

// dirtyBytes is the size of f's dirty pages in the page cache (cachestat,
// Linux 6.5+).
func dirtyBytes(t *testing.T, f *os.File) int64 {
	var rng [2]uint64  // offset, length (0: to the end)
	var stat [5]uint64 // cache, dirty, writeback, evicted, recently evicted
	_, _, errno := unix.Syscall6(unix.SYS_CACHESTAT, f.Fd(), uintptr(unsafe.Pointer(&rng)), uintptr(unsafe.Pointer(&stat)), 0, 0, 0)
	require.Zero(t, errno, "cachestat")
	return int64(stat[1]) * int64(os.Getpagesize())
}
