package loglimit

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The first logBurst lines of an interval pass; the next one to pass,
// an interval later, says how many were left out.
func TestAllow(t *testing.T) {
	var l Limit
	for i := range logBurst {
		ok, skipped := l.Allow()
		assert.True(t, ok, "line %d", i)
		assert.Zero(t, skipped)
	}
	for range 5 {
		ok, _ := l.Allow()
		assert.False(t, ok)
	}
	l.start = time.Now().Add(-logInterval - time.Second)
	ok, skipped := l.Allow()
	assert.True(t, ok)
	assert.Equal(t, 5, skipped)
	ok, skipped = l.Allow()
	assert.True(t, ok)
	assert.Zero(t, skipped, "counted once")
}

// A short path is logged whole; a long one keeps its head and tail and
// says how long it was.
func TestPath(t *testing.T) {
	assert.Equal(t, "a/b", Path("a/b"))
	short := strings.Repeat("x", 288)
	assert.Equal(t, short, Path(short))
	long := strings.Repeat("h", 64) + strings.Repeat("m", 1000) + strings.Repeat("t", 192)
	assert.Equal(t, strings.Repeat("h", 64)+"...(1256 bytes)..."+strings.Repeat("t", 192), Path(long))
}
