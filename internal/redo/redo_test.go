package redo

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/journal"
)

func fd(t *testing.T) int {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return int(f.Fd())
}

// Records are queued by file, each file with a descriptor of its own;
// a checkpoint is due at MaxEntries, or MaxBytes, and called Delay
// after the first; Take empties the queue.
func TestQueue(t *testing.T) {
	var q Queue[string]
	var called atomic.Int32
	checkpoint := func() { called.Add(1) }
	a, b := fd(t), fd(t)
	e1, e2, e3 := &journal.Entry{}, &journal.Entry{}, &journal.Entry{}
	due, err := q.Add("a", a, e1, 10, checkpoint)
	require.NoError(t, err)
	assert.False(t, due)
	_, err = q.Add("a", a, e2, 10, checkpoint)
	require.NoError(t, err)
	_, err = q.Add("b", b, e3, 10, checkpoint)
	require.NoError(t, err)
	assert.Equal(t, 3, q.Len())
	files := q.Take()
	require.Len(t, files, 2)
	assert.Equal(t, []*journal.Entry{e1, e2}, files["a"].Entries)
	assert.Equal(t, []*journal.Entry{e3}, files["b"].Entries)
	assert.NotEqual(t, a, files["a"].Fd, "the file's own descriptor, not a dup")
	for _, f := range files {
		_, err := unix.FcntlInt(uintptr(f.Fd), unix.F_GETFD, 0)
		require.NoError(t, err)
		unix.Close(f.Fd)
	}
	assert.Zero(t, q.Len())
	time.Sleep(Delay + 100*time.Millisecond)
	assert.Zero(t, called.Load(), "Take stops the timer")

	due, err = q.Add("a", a, e1, MaxBytes, checkpoint)
	require.NoError(t, err)
	assert.True(t, due, "MaxBytes pending")
	require.Eventually(t, func() bool { return called.Load() == 1 }, 10*Delay, 10*time.Millisecond)
	for _, f := range q.Take() {
		unix.Close(f.Fd)
	}
	for i := range MaxEntries {
		due, err = q.Add("a", a, e1, 1, checkpoint)
		require.NoError(t, err)
		assert.Equal(t, i == MaxEntries-1, due, "record %d", i)
	}
	for _, f := range q.Take() {
		unix.Close(f.Fd)
	}
	_, err = q.Add("c", -1, e1, 1, checkpoint)
	assert.Error(t, err, "no descriptor to dup")
	q.Take()
}
