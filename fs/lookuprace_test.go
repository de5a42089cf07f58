package fs

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The kernel revalidates a cached name with a lookup that does not hold
// the directory's lock, so a rename through the mount can come between
// the lookup's stat and its naming of the file. The file renamed over
// must not get the name back: its writer's close then has nowhere to
// commit, as on a local file system (it failed with ESTALE).
func TestLookupRacingRename(t *testing.T) {
	srv, backing, mnt := mountForTest(t)
	data, other := filepath.Join(mnt, "data"), filepath.Join(mnt, "other")
	require.NoError(t, os.WriteFile(data, []byte("old\n"), 0o644))
	require.NoError(t, os.WriteFile(other, []byte("new\n"), 0o644))
	w, err := os.OpenFile(data, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer w.Close()
	_, err = w.WriteString("mine\n")
	require.NoError(t, err)
	time.Sleep(1100 * time.Millisecond) // the kernel's entry expires: the next walk revalidates

	var fired atomic.Bool
	at := func(point string) {
		if point == "lookup-stated" && fired.CompareAndSwap(false, true) {
			assert.NoError(t, exec.Command("mv", other, data).Run(), "rename during the lookup")
		}
	}
	srv.r.atPoint.Store(&at)
	out, err := exec.Command("cat", data).Output() // another process: a revalidating lookup
	srv.r.atPoint.Store(nil)
	require.NoError(t, err)
	require.True(t, fired.Load(), "no lookup was sent")
	t.Logf("the reader read %q", out)

	require.NoError(t, w.Close(), "close of the writer whose file was renamed over")
	b, err := os.ReadFile(filepath.Join(backing, "data"))
	require.NoError(t, err)
	assert.Equal(t, "new\n", string(b))
}
