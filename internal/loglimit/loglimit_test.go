package loglimit

import (
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
