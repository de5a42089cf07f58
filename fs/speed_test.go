package fs

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/safefs/safefs/rmw"
)

// A thread that opened a handle is answered from it; others from /proc.
func TestTgidOfFromHandle(t *testing.T) {
	self := uint32(os.Getpid())
	h := &handle{tid: 4_000_001, tgid: 77}
	assert.Equal(t, uint32(77), h.tgidOf(4_000_001))
	assert.Equal(t, self, h.tgidOf(self), "another thread is read from /proc")
	unknown := &handle{tid: self, tgid: 0}
	assert.Equal(t, self, unknown.tgidOf(self), "a handle that did not know its process does not answer")

	f := newFile(1, 0, key{})
	f.addHandle(h)
	assert.Equal(t, uint32(77), f.tgidOf(4_000_001))
	assert.Equal(t, self, f.tgidOf(self))
}

// A pair seen holding a lock is not read in /proc again for a while.
func TestLockingPairs(t *testing.T) {
	var l lockingPairs
	p := rmw.Pair{Path: "count", Cmd: "perl"}
	now := time.Now()
	assert.False(t, l.has(p, now))
	l.add(p, now)
	assert.True(t, l.has(p, now.Add(lockingKeep-time.Millisecond)))
	assert.False(t, l.has(p, now.Add(lockingKeep)), "kept past lockingKeep")
	assert.False(t, l.has(rmw.Pair{Path: "count", Cmd: "other"}, now))
	for i := range maxLockingPairs {
		l.add(rmw.Pair{Path: strconv.Itoa(i)}, now)
	}
	assert.LessOrEqual(t, len(l.seen), maxLockingPairs, "unbounded")
	assert.False(t, l.has(p, now), "the full set was not started afresh")
}
