package testfs

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/fs"
)

// TestRMWHoldKeptForTemporaryFile: sed -i's order. The holder reads the
// selected file, creates a temporary file, closes what it read, and is
// slow (a loaded machine, an fsync) before it writes, closes and renames
// the temporary file over the file. Its session must last through that,
// however long past rmw_hold: an opener that comes meanwhile waits, and
// reads the renamed version. Before the temporary file counted, the
// hold ran out and the opener read the old version (an update lost).
func TestRMWHoldKeptForTemporaryFile(t *testing.T) {
	const hold = 50 * time.Millisecond
	m, _, dir, _ := rmwSetup(t, func(o *fs.Options) { o.RMWGlobs, o.RMWHold, o.RMWWait = []string{"*.txt"}, hold, exactWait })
	f, tmp := filepath.Join(dir, "f.txt"), filepath.Join(dir, "f.new")
	require.NoError(t, os.WriteFile(f, []byte("0"), 0o644))

	start, read := make(chan struct{}), make(chan string, 1)
	go func() { // the next request: a thread of its own
		runtime.LockOSThread()
		<-start
		b, err := os.ReadFile(f)
		if err != nil {
			b = []byte(err.Error())
		}
		read <- string(b)
	}()

	runtime.LockOSThread() // the holder: FUSE sees one thread
	defer runtime.UnlockOSThread()
	in, err := unix.Open(f, unix.O_RDONLY, 0)
	require.NoError(t, err)
	out, err := unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o644)
	require.NoError(t, err)
	require.NoError(t, unix.Close(in))
	time.Sleep(4 * hold) // slow: a hold not kept has run out by now
	close(start)
	var got string
	require.Eventually(t, func() bool {
		select {
		case got = <-read: // no wait: the session was gone
			return true
		default:
		}
		for _, s := range m.Status().Sessions {
			if len(s.Waiters) > 0 {
				return true
			}
		}
		return false
	}, time.Minute, time.Millisecond, "the opener neither waited nor read")
	_, err = unix.Write(out, []byte("1"))
	require.NoError(t, err)
	require.NoError(t, unix.Close(out))
	require.NoError(t, unix.Rename(tmp, f))
	if got == "" {
		got = <-read
	}
	require.Equal(t, "1", got, "the next request read the version before the holder's rename")
}
