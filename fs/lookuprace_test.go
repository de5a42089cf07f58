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
	"golang.org/x/sys/unix"
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

// A commit can replace the version a lookup has just stat'ed. The old
// inode, which no logical file owns once the commit has ended, must not
// become a file of its own: a second logical file for the path, whose
// locks and commits would not meet the first's. (The kernel drops a
// revalidation that answers with another node and looks up again, so
// the lookup is called here directly, as the kernel's first lookup of
// a name.)
func TestLookupRacingCommit(t *testing.T) {
	srv, backing, mnt := mountForTest(t)
	data := filepath.Join(mnt, "data")
	require.NoError(t, os.WriteFile(data, []byte("old\n"), 0o644))
	var old unix.Stat_t
	require.NoError(t, unix.Stat(filepath.Join(backing, "data"), &old))
	w, err := os.OpenFile(data, os.O_WRONLY|os.O_TRUNC, 0)
	require.NoError(t, err)
	_, err = w.WriteString("new\n")
	require.NoError(t, err)

	var fired atomic.Bool
	at := func(point string) {
		if point == "lookup-stat" && fired.CompareAndSwap(false, true) {
			assert.NoError(t, w.Close(), "the commit during the lookup")
			// The writer's release lets the old version go.
			assert.Eventually(t, func() bool { return !srv.r.ids.known(keyOf(&old)) },
				5*time.Second, 10*time.Millisecond, "the old version is still known")
		}
	}
	srv.r.atPoint.Store(&at)
	top := srv.r.newNode(srv.r.top)
	st, f, err := top.lookupFile(srv.r.rootfd, "data", srv.r.changes.Now())
	srv.r.atPoint.Store(nil)
	require.NoError(t, err)
	require.True(t, fired.Load())
	var now unix.Stat_t
	require.NoError(t, unix.Stat(filepath.Join(backing, "data"), &now))
	assert.Equal(t, now.Ino, st.Ino, "the lookup found the version renamed over")
	assert.True(t, srv.r.ids.owns(f, keyOf(&now)), "the lookup's file is not the committed one's")
}
