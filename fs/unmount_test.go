package fs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/mountwatch"
)

// A copy of the mount in a mount namespace made after the mount (a
// service with PrivateTmp=) is not unmounted with it. The daemon's
// unmount still ends, by ending the connection, and a version a writer
// there had pending is not committed. Also when the mount was unmounted
// from outside first, and with no unmount by the daemon at all (an
// fstab mount unit's stop): the daemon ends its serve loop by itself.
func TestUnmountHeldElsewhere(t *testing.T) {
	for _, how := range []string{"daemon", "outside-then-daemon", "outside"} {
		t.Run(how, func(t *testing.T) {
			srv, backing, mnt := mountForTest(t)
			p := filepath.Join(mnt, "page")
			require.NoError(t, os.WriteFile(p, []byte("old"), 0o644))
			holder := holdMountElsewhere(t, mnt)
			writer := exec.Command("nsenter", "-t", strconv.Itoa(holder), "-m", "perl", "-e",
				`open(F, ">", $ARGV[0]) or die "$!"; print F "half"; $| = 1; select(F); $| = 1; sleep 600`, p)
			require.NoError(t, writer.Start())
			t.Cleanup(func() { _ = writer.Process.Kill(); _ = writer.Wait() })
			require.Eventually(t, func() bool { return pendingIn(srv, "page") }, 10*time.Second, 20*time.Millisecond,
				"the writer's pending version never reached the daemon")
			if how != "daemon" {
				require.NoError(t, unix.Unmount(mnt, 0))
			}
			if how == "outside" {
				requireServeEnds(t, srv, 30*time.Second, "the daemon still serves the other mount namespace")
			} else {
				done := make(chan error, 1)
				go func() { done <- srv.Unmount() }()
				select {
				case err := <-done:
					require.NoError(t, err)
				case <-time.After(30 * time.Second):
					t.Fatal("Unmount still waits while another mount namespace holds the mount")
				}
			}
			b, err := os.ReadFile(filepath.Join(backing, "page"))
			require.NoError(t, err)
			require.Equal(t, "old", string(b), "a version pending in the cut-off namespace was committed")
		})
	}
}

// A lazy unmount here leaves files open through the mount served until
// their last close, after which the daemon's serve loop ends.
func TestLazyUnmountServesOpenFiles(t *testing.T) {
	srv, _, mnt := mountForTest(t)
	// The mount's watcher again, telling its decisions after the unmount:
	// a look that finds the mount not gone (nothing to do), or the end
	// of the connection (a look that found it gone, and the one after
	// heldElsewhere).
	decided := make(chan string, 64)
	var unmounted atomic.Bool
	srv.stopWatch()
	srv.watch = mountwatch.Start(watchEvery, heldElsewhere, func() bool {
		after := unmounted.Load()
		gone := srv.heldOnlyElsewhere()
		if after && !gone {
			select {
			case decided <- "kept":
			default: // the test has its answer
			}
		}
		return gone
	}, func() {
		srv.endConnection()
		decided <- "ended the connection"
	})
	p := filepath.Join(mnt, "page")
	require.NoError(t, os.WriteFile(p, []byte("kept"), 0o644))
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, unix.Unmount(mnt, unix.MNT_DETACH))
	unmounted.Store(true)
	select {
	case d := <-decided:
		require.Equal(t, "kept", d, "the mount's watcher, after a lazy unmount with a file open")
	case <-time.After(time.Minute):
		t.Fatal("the mount's watcher did not look at the mount within a minute")
	}
	b := make([]byte, 4)
	n, err := f.ReadAt(b, 0)
	require.NoError(t, err, "a file open through a lazy unmount was cut off")
	require.Equal(t, "kept", string(b[:n]))
	require.NoError(t, f.Close())
	requireServeEnds(t, srv, 30*time.Second, "the serve loop outlived the last file of a lazy unmount")
}

// requireServeEnds waits for srv's serve loop to end by itself.
func requireServeEnds(t *testing.T, srv *Server, limit time.Duration, msg string) {
	ended := make(chan struct{})
	go func() { srv.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(limit):
		t.Fatal(msg)
	}
}

// holdMountElsewhere starts a process in a private copy of this mount
// namespace, which holds mnt, and returns its pid.
func holdMountElsewhere(t *testing.T, mnt string) int {
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sleep", "600")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var pid int
	require.Eventually(t, func() bool {
		// unshare execs sleep: the same pid, in the new namespace.
		b, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/mountinfo")
		pid = cmd.Process.Pid
		return err == nil && strings.Contains(string(b), " "+mnt+" ") && nsOf(pid) != nsOf(os.Getpid())
	}, 10*time.Second, 20*time.Millisecond)
	return pid
}

func nsOf(pid int) string {
	l, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/mnt")
	return l
}

// pendingIn reports whether a handle of a file named nm holds changes
// no commit has published.
func pendingIn(srv *Server, nm string) bool {
	for _, f := range srv.r.ids.all() {
		for _, h := range f.handleList() {
			h.mu.Lock()
			dirty := h.p.dirty() && strings.HasSuffix(h.n.path(), nm)
			h.mu.Unlock()
			if dirty {
				return true
			}
		}
	}
	return false
}
