package lockmgr

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSnapshot: holders with their tags and tokens, waiters in FIFO
// order with theirs, keys ascending, and nothing once all is released.
func TestSnapshot(t *testing.T) {
	m := New(Options{})
	ctx := context.Background()
	g7, err := m.LockTagged(ctx, "a", 7)
	require.NoError(t, err)
	g3, err := m.LockTagged(ctx, "b", 3)
	require.NoError(t, err)
	w1 := lockTaggedAsync(ctx, m, "w1", 7)
	waitUntil(t, func() bool { return m.Waiting(7) == 1 })
	w2 := lockTaggedAsync(ctx, m, "w2", 7)
	waitUntil(t, func() bool { return m.Waiting(7) == 2 })

	s := m.Snapshot()
	require.Len(t, s, 2)
	assert.Equal(t, uint64(3), s[0].Key)
	assert.Equal(t, "b", s[0].Tag)
	assert.Equal(t, g3.Token(), s[0].Holder)
	assert.Empty(t, s[0].Waiters)
	assert.Equal(t, uint64(7), s[1].Key)
	assert.Equal(t, "a", s[1].Tag)
	assert.Equal(t, g7.Token(), s[1].Holder)
	require.Len(t, s[1].Waiters, 2)
	assert.Equal(t, "w1", s[1].Waiters[0].Tag)
	assert.Equal(t, "w2", s[1].Waiters[1].Tag)
	assert.False(t, s[1].Since.After(s[1].Waiters[0].Since), "the holder held before the first waiter waited")

	g7.Release()
	r1 := <-w1
	require.NoError(t, r1.err)
	s = m.Snapshot()
	require.Len(t, s, 2)
	assert.Equal(t, "w1", s[1].Tag, "the key went to the first waiter")
	assert.Equal(t, r1.g.Token(), s[1].Holder)
	require.Len(t, s[1].Waiters, 1)
	assert.Equal(t, "w2", s[1].Waiters[0].Tag)

	r1.g.Release()
	r2 := <-w2
	require.NoError(t, r2.err)
	r2.g.Release()
	g3.Release()
	assert.Empty(t, m.Snapshot())
}

// TestSnapshotUntagged: Lock reports a nil tag.
func TestSnapshotUntagged(t *testing.T) {
	m := New(Options{})
	g := mustLock(t, m, 1, 2)
	s := m.Snapshot()
	require.Len(t, s, 2)
	for _, k := range s {
		assert.Nil(t, k.Tag)
		assert.Equal(t, g.Token(), k.Holder)
	}
	g.Release()
}

func lockTaggedAsync(ctx context.Context, m *Manager, tag any, keys ...uint64) <-chan result {
	ch := make(chan result, 1)
	go func() {
		g, err := m.LockTagged(ctx, tag, keys...)
		ch <- result{g, err}
	}()
	return ch
}
