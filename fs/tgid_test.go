package fs

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
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
