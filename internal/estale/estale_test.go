package estale

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A refused thread's next open passes, once; an unknown thread's does
// not; a refusal older than refusalLife is forgotten.
func TestRefusals(t *testing.T) {
	var r Refusals
	assert.False(t, r.Take(7))
	r.Note(7)
	r.Note(0) // unknown thread: nothing to remember
	assert.True(t, r.Take(7))
	assert.False(t, r.Take(7), "taken twice")
	assert.False(t, r.Take(0))

	r.Note(8)
	r.at[8] -= int64(refusalLife)
	assert.False(t, r.Take(8), "an old refusal let through")
	r.Note(9)
	r.at[9] -= int64(refusalLife + time.Second)
	r.Note(10) // prunes what is old
	_, kept := r.at[9]
	assert.False(t, kept)
	assert.True(t, r.Take(10))
}
