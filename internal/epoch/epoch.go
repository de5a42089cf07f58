// Package epoch tells a lookup whether what it saw may have changed
// under it: changes of what a name leads to (a commit, a rename, a
// removal) are counted as they begin and end, and a lookup's stat holds
// if none began since it was taken and none was running then.
package epoch

import "sync/atomic"

// Changes counts the changes begun and ended. The zero value is ready.
type Changes struct{ begun, ended atomic.Uint64 }

// Epoch is taken before a lookup stats a name (Now).
type Epoch struct {
	begun uint64
	idle  bool
}

// Now is the epoch to take before a stat.
func (c *Changes) Now() Epoch {
	b := c.begun.Load()
	return Epoch{b, c.ended.Load() == b}
}

// Stable reports whether no change began since e was taken and none was
// running then, so that a stat taken after e describes a committed
// version that still has that name.
func (c *Changes) Stable(e Epoch) bool {
	return e.idle && c.begun.Load() == e.begun
}

// Begin marks a change of what a name leads to; done marks its end.
func (c *Changes) Begin() (done func()) {
	c.begun.Add(1)
	return func() { c.ended.Add(1) }
}
