package journal

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// Every caller returns only after a sync that started after its write,
// and a burst of callers shares syncs.
func TestGroupSyncCoversEachWrite(t *testing.T) {
	var g GroupSync
	var written, covered, calls atomic.Int64
	fsync := func() error {
		calls.Add(1)
		seen := written.Load()
		time.Sleep(2 * time.Millisecond)
		covered.Store(seen)
		return nil
	}
	const n = 32
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := written.Add(1)
			assert.NoError(t, g.Do(fsync))
			assert.GreaterOrEqual(t, covered.Load(), w, "returned before a sync covered its write")
		}()
	}
	wg.Wait()
	assert.Less(t, calls.Load(), int64(n), "32 concurrent callers made one fsync each")
}

// A caller whose covering sync failed gets its error; later ones do not.
func TestGroupSyncError(t *testing.T) {
	var g GroupSync
	boom := errors.New("EIO")
	require.ErrorIs(t, g.Do(func() error { return boom }), boom)
	require.NoError(t, g.Do(func() error { return nil }))

	release, running := make(chan struct{}), make(chan struct{})
	first := make(chan error)
	go func() { first <- g.Do(func() error { close(running); <-release; return nil }) }()
	// The second caller arrives while the first sync runs: it needs the next one.
	<-running
	second := make(chan error)
	go func() { second <- g.Do(func() error { return boom }) }()
	time.Sleep(20 * time.Millisecond) // let it reach its wait: no event shows it
	close(release)
	require.NoError(t, <-first)
	require.ErrorIs(t, <-second, boom)
}

// A lazy end is written at once, made durable by SyncEnds or the next
// fsync, and SyncEnds has nothing to do when none is pending.
func TestCommitLazy(t *testing.T) {
	e := newEnv(t)
	j, err := Open(e.dir(), true, zaptest.NewLogger(t))
	require.NoError(t, err)
	a, err := j.Begin(Record{Kind: Append, Target: "data/b", Dev: 7, Ino: 9, OldSize: 3, Len: 4, CRC: 5})
	require.NoError(t, err)
	require.NoError(t, a.CommitLazy())
	assert.Equal(t, `{"end":1}`, checkLine(t, lines(e.journalBytes())[1]), "the end line is written at once")
	assert.Equal(t, [2]uint64{1, 0}, [2]uint64{j.lazyEnds, j.syncedEnds}, "one end not durable yet")
	require.NoError(t, j.SyncEnds())
	assert.Equal(t, [2]uint64{1, 1}, [2]uint64{j.lazyEnds, j.syncedEnds}, "SyncEnds made it durable")

	b, err := j.Begin(Record{Kind: Append, Target: "data/c", Dev: 7, Ino: 10, OldSize: 3, Len: 4, CRC: 5})
	require.NoError(t, err)
	require.NoError(t, b.CommitLazy())
	c, err := j.Begin(Record{Kind: Append, Target: "data/d", Dev: 7, Ino: 11, OldSize: 3, Len: 4, CRC: 5})
	require.NoError(t, err)
	assert.Equal(t, [2]uint64{2, 2}, [2]uint64{j.lazyEnds, j.syncedEnds}, "a Begin's fsync covers earlier lazy ends")
	require.NoError(t, c.Commit())
	require.NoError(t, j.Close())
	assert.Empty(t, e.journalBytes(), "no entry open at Close: the journal is emptied")
}
