package fs

import (
	"os"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"golang.org/x/sys/unix"
)

// tgidOf answers for a thread group leader without /proc and for any
// other thread through /proc: both must name the process.
func TestTgidOfLeaderAndThread(t *testing.T) {
	self := uint32(os.Getpid())
	assert.True(t, isLeader(self))
	assert.Equal(t, self, tgidOf(self))
	other, done := lockedThread()
	defer close(done)
	for other == self { // locked on the main thread: take another one
		var d chan struct{}
		other, d = lockedThread()
		defer close(d)
	}
	assert.False(t, isLeader(other), "a thread that does not lead its group")
	assert.Equal(t, self, tgidOf(other))
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
