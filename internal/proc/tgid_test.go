package proc

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Tgid answers for a thread group leader without /proc and for any
// other thread through /proc: both must name the process.
func TestTgidOfLeaderAndThread(t *testing.T) {
	self := uint32(os.Getpid())
	assert.True(t, isLeader(self))
	assert.Equal(t, self, Tgid(self))
	other, done := lockedThread()
	defer close(done)
	for other == self { // locked on the main thread: take another one
		var d chan struct{}
		other, d = lockedThread()
		defer close(d)
	}
	assert.False(t, isLeader(other), "a thread that does not lead its group")
	assert.Equal(t, self, Tgid(other))
	tgid, ok := pidfdTgid(other)
	if kernelAtLeast(t, 6, 13) {
		assert.True(t, ok, "no pidfd answer (PIDFD_THREAD, PIDFD_GET_INFO)")
	}
	if ok {
		assert.Equal(t, self, tgid)
	}
}

// kernelAtLeast reports whether the running kernel is major.minor or
// later.
func kernelAtLeast(t *testing.T, major, minor int) bool {
	var u unix.Utsname
	require.NoError(t, unix.Uname(&u))
	var ma, mi int
	_, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi)
	require.NoError(t, err)
	return ma > major || ma == major && mi >= minor
}

// lockedThread is a thread of this process kept alive until done closes.
func lockedThread() (uint32, chan struct{}) {
	tid, done := make(chan uint32), make(chan struct{})
	go func() {
		runtime.LockOSThread() // ends with the goroutine: never reused
		tid <- uint32(unix.Gettid())
		<-done
	}()
	return <-tid, done
}

// A live thread has its descriptor table: the kill check answers it
// without reading /proc/<pid>/stat (Linux 6.2+ counts the table's
// descriptors in the size of /proc/<pid>/fd). A dying one is the mount's
// self-test's case (a writer killed by SIGKILL does not commit).
func TestHasFilesLiveThread(t *testing.T) {
	if !kernelAtLeast(t, 6, 2) {
		// The size is 0 there: every check reads /proc/<pid>/stat.
		assert.False(t, hasFiles(uint32(os.Getpid())))
		return
	}
	other, done := lockedThread()
	defer close(done)
	assert.True(t, hasFiles(uint32(os.Getpid())))
	assert.True(t, hasFiles(other), "a thread's own /proc/<tid>/fd")
	assert.False(t, KilledBySignal(other))
}

// A remembered process is used only while the kernel says the thread is
// still one of its threads: a tid the table gives to another process
// (as a reused tid would be) is asked again and remembered anew.
func TestTgidOfRemembered(t *testing.T) {
	self := uint32(os.Getpid())
	other, done := lockedThread()
	defer close(done)
	for other == self {
		var d chan struct{}
		other, d = lockedThread()
		defer close(d)
	}
	assert.True(t, threadOf(self, other))
	assert.False(t, threadOf(1, other), "not a thread of init")
	threadGroups.put(other, 1)
	assert.Equal(t, self, Tgid(other), "a stale entry is not trusted")
	tgid, ok := threadGroups.get(other)
	assert.True(t, ok)
	assert.Equal(t, self, tgid, "the answer found is remembered")
}

// TgidOrSelf is Tgid, or the thread itself when nothing can be told.
func TestTgidOrSelf(t *testing.T) {
	self := uint32(os.Getpid())
	other, done := lockedThread()
	defer close(done)
	assert.Equal(t, self, TgidOrSelf(self))
	assert.Equal(t, self, TgidOrSelf(other))
	const gone = 1 << 30 // above pid_max: no such thread
	assert.Equal(t, uint32(gone), TgidOrSelf(gone))
	assert.Zero(t, Tgid(gone))
	assert.Zero(t, TgidOrSelf(0))
}

func TestParent(t *testing.T) {
	if got := Parent(uint32(os.Getpid())); got != uint32(os.Getppid()) {
		t.Fatalf("Parent(self) = %d, want %d", got, os.Getppid())
	}
	if Parent(0) != 0 {
		t.Fatal("Parent(0) is not 0")
	}
}

func TestSingleThreaded(t *testing.T) {
	if SingleThreaded(uint32(os.Getpid())) {
		t.Fatal("a Go test binary runs several threads")
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if !SingleThreaded(uint32(cmd.Process.Pid)) {
		t.Fatal("sleep is single-threaded")
	}
}
