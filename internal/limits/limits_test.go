package limits

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSpaceCache(t *testing.T) {
	var c Space
	assert.False(t, c.Take(1), "nothing sampled yet")
	c.Set(5*4096, 4096)
	assert.True(t, c.Take(100))                 // costs 2 blocks
	assert.True(t, c.Take(4096))                // 3 blocks
	assert.False(t, c.Take(1), "left: 0 bytes") // a fresh statfs decides
	c.Set(1<<30, 4096)
	c.at = time.Now().Add(-spaceTTL)
	assert.False(t, c.Take(1), "a stale sample grants nothing")
}

// One uid gets its share (EMFILE past it), all uids the total (ENFILE);
// root is never counted nor refused; a slot given back is free again.
func TestFiles(t *testing.T) {
	s := &Files{perUser: 2, total: 3, byUID: map[uint32]int{}}
	require.NoError(t, s.Take(33))
	require.NoError(t, s.Take(33))
	assert.ErrorIs(t, s.Take(33), syscall.EMFILE)
	require.NoError(t, s.Take(34))
	assert.ErrorIs(t, s.Take(35), syscall.ENFILE)
	for range 10 {
		require.NoError(t, s.Take(0), "root")
	}
	s.Give(33)
	require.NoError(t, s.Take(35))
	s.Give(0)
	assert.Equal(t, 3, s.all)

	d := NewFiles(0)
	assert.GreaterOrEqual(t, d.total, 16)
	assert.Equal(t, max(d.total/2, 8), d.perUser)
	assert.Equal(t, 5, NewFiles(5).perUser)
}

// rejected/ takes bytes within both bounds; what was found at mount
// counts whatever the bounds; bytes given back are free again.
func TestKept(t *testing.T) {
	k := NewKept(100, 60)
	assert.True(t, k.Take(33, 60))
	assert.False(t, k.Take(33, 1), "past the uid's bound")
	assert.True(t, k.Take(34, 40))
	assert.False(t, k.Take(35, 1), "past the bound of all")
	assert.True(t, k.Take(34, -40))
	assert.True(t, k.Take(35, 40))
	k.Kept()
	k.Found(^uint32(0), 500)
	files, bytes := k.Totals()
	assert.EqualValues(t, 2, files)
	assert.EqualValues(t, 600, bytes)
	assert.False(t, k.Take(36, 1), "the files found count")
}
