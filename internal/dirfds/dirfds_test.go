package dirfds

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func open(t *testing.T) int {
	t.Helper()
	fd, err := unix.Open(t.TempDir(), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	return fd
}

func isOpen(fd int) bool {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	return err == nil
}

// An fd kept is held by each use, and stays open among the idle ones
// after the last.
func TestHeldKeepDrop(t *testing.T) {
	var d Cache
	e := NewEntry()
	_, ok := d.Held(&e)
	assert.False(t, ok, "no fd yet")
	fd := open(t)
	assert.Equal(t, fd, d.Keep(&e, fd))
	other := open(t)
	assert.Equal(t, fd, d.Keep(&e, other), "another request's fd came first")
	assert.False(t, isOpen(other), "the second fd was not closed")
	got, ok := d.Held(&e)
	require.True(t, ok)
	assert.Equal(t, fd, got)
	for range 3 { // two Keeps and a Held
		d.Drop(&e)
	}
	assert.Equal(t, 1, d.idle)
	assert.True(t, isOpen(fd), "an idle fd closed")
	d.CloseAll()
	assert.False(t, isOpen(fd))
	_, ok = d.Held(&e)
	assert.False(t, ok)
}

// Beyond Kept idle fds the least recently used are closed.
func TestKeptBound(t *testing.T) {
	var d Cache
	es := make([]Entry, Kept+10)
	for i := range es {
		es[i] = NewEntry()
		d.Keep(&es[i], open(t))
		d.Drop(&es[i])
	}
	assert.Equal(t, Kept, d.idle)
	for i := range es { // (fd numbers are reused: the entries tell)
		assert.Equal(t, i >= 10, es[i].fd >= 0, "entry %d", i)
	}
	// A use takes an fd out of the idle list: it is not closed.
	_, ok := d.Held(&es[10])
	require.True(t, ok)
	more := []Entry{NewEntry(), NewEntry()} // Kept-1 idle, and two more
	for i := range more {
		d.Keep(&more[i], open(t))
		d.Drop(&more[i])
	}
	assert.GreaterOrEqual(t, es[10].fd, 0, "an fd in use was closed")
	assert.Less(t, es[11].fd, 0, "the least recently used idle fd kept")
	d.Drop(&es[10])
	d.CloseAll()
}

// A forgotten directory's fd closes at once when idle, else at its last
// use; after CloseAll an fd in use closes at its last use.
func TestForgetAndCloseAll(t *testing.T) {
	var d Cache
	idle, used := NewEntry(), NewEntry()
	a := d.Keep(&idle, open(t))
	d.Drop(&idle)
	d.Forget(&idle)
	assert.False(t, isOpen(a))
	b := d.Keep(&used, open(t))
	d.Forget(&used)
	assert.True(t, isOpen(b), "closed under a request")
	d.Drop(&used)
	assert.False(t, isOpen(b))

	late := NewEntry()
	c := d.Keep(&late, open(t))
	d.CloseAll()
	assert.True(t, isOpen(c), "closed under a request")
	d.Drop(&late)
	assert.False(t, isOpen(c))
}
