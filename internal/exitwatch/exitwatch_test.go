package exitwatch

import (
	"os"
	"os/exec"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

type session struct{ ends atomic.Int32 }

func (s *session) End()        { s.ends.Add(1) }
func (s *session) Ended() bool { return s.ends.Load() > 0 }

func newWatch(t *testing.T) *Watch {
	w, err := New()
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	return w
}

func ended(t *testing.T, s *session, what string) {
	t.Helper()
	require.Eventually(t, s.Ended, 10*time.Second, time.Millisecond, what)
}

// A holder thread's exit ends its sessions, while its process lives on.
func TestThreadExit(t *testing.T) {
	w := newWatch(t)
	// A thread of its own, locked: it exits with its goroutine. Not the
	// main thread, which the runtime never lets exit.
	thread := func() (int32, chan struct{}) {
		tid, done := make(chan int32), make(chan struct{})
		go func() {
			runtime.LockOSThread() // not unlocked: the thread exits with the goroutine
			tid <- int32(unix.Gettid())
			<-done
		}()
		return <-tid, done
	}
	holder, done := thread()
	for holder == int32(os.Getpid()) {
		defer close(done)
		holder, done = thread()
	}
	a, b := &session{}, &session{}
	w.Add(holder, a)
	w.Add(holder, b)
	time.Sleep(10 * time.Millisecond)
	assert.False(t, a.Ended() || b.Ended(), "ended while the thread lives")
	close(done)
	ended(t, a, "first session")
	ended(t, b, "second session")
}

// A process's exit ends its session; one already gone ends at once.
func TestProcessExit(t *testing.T) {
	w := newWatch(t)
	cmd := exec.Command("sleep", "30")
	require.NoError(t, cmd.Start())
	s := &session{}
	w.Add(int32(cmd.Process.Pid), s)
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	ended(t, s, "the killed holder's session")

	gone := &session{}
	w.Add(1<<30, gone) // above pid_max: no such thread
	assert.True(t, gone.Ended(), "a holder gone already")
}

// A long-lived holder's ended sessions are forgotten as it takes more.
func TestEndedForgotten(t *testing.T) {
	w := newWatch(t)
	cmd := exec.Command("sleep", "30")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := int32(cmd.Process.Pid)
	for range 10 {
		s := &session{}
		w.Add(pid, s)
		s.End()
	}
	live := &session{}
	w.Add(pid, live)
	w.mu.Lock()
	n := len(w.procs[pid].ss)
	w.mu.Unlock()
	assert.Equal(t, 1, n, "the ended sessions are kept")
}

// After Stop nothing is watched; Stop again does nothing.
func TestStop(t *testing.T) {
	w, err := New()
	require.NoError(t, err)
	cmd := exec.Command("sleep", "30")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	w.Stop()
	w.Stop()
	s := &session{}
	w.Add(int32(cmd.Process.Pid), s)
	assert.False(t, s.Ended())
}
