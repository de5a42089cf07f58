package recent

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/safefs/safefs/rmw"
)

// fs's bounds for the pairs seen locking.
const (
	lockingKeep     = 10 * time.Second
	maxLockingPairs = 4096
)

// A pair seen holding a lock is not read in /proc again for a while.
func TestLockingPairs(t *testing.T) {
	l := Set[rmw.Pair]{Keep: lockingKeep, Max: maxLockingPairs}
	p := rmw.Pair{Path: "count", Cmd: "perl"}
	now := time.Now()
	assert.False(t, l.Has(p, now))
	l.Add(p, now)
	assert.True(t, l.Has(p, now.Add(lockingKeep-time.Millisecond)))
	assert.False(t, l.Has(p, now.Add(lockingKeep)), "kept past lockingKeep")
	assert.False(t, l.Has(rmw.Pair{Path: "count", Cmd: "other"}, now))
	for i := range maxLockingPairs {
		l.Add(rmw.Pair{Path: strconv.Itoa(i)}, now)
	}
	assert.LessOrEqual(t, len(l.seen), maxLockingPairs, "unbounded")
	assert.False(t, l.Has(p, now), "the full set was not started afresh")
}
