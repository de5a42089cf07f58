package epoch

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// An epoch taken while nothing changes is stable until a change begins;
// one taken during a change never is.
func TestChanges(t *testing.T) {
	var c Changes
	e := c.Now()
	assert.True(t, c.Stable(e))
	done := c.Begin()
	assert.False(t, c.Stable(e), "a change began since")
	during := c.Now()
	done()
	assert.False(t, c.Stable(during), "taken during a change")
	after := c.Now()
	assert.True(t, c.Stable(after))
	c.Begin()()
	assert.False(t, c.Stable(after))
}
