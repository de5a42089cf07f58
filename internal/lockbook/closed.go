package lockbook

// A flock lock ends with its open file's RELEASE, which the kernel sends
// in the background after the last close() returned; on a local file
// system it ends within that close(). fs makes a non-blocking flock that
// conflicts only with handles closed since their last use wait for their
// RELEASE (ClosedHolders), and HeldBy does not count such a lock.

// ClosedHolders reports whether f has flock owners other than o, all of
// them closed (closedLocked).
func (b *Book[F, H]) ClosedHolders(f F, o Owner) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	fl := b.files[f]
	if fl == nil {
		return false
	}
	some := false
	for w := range fl.owners {
		if w.Flock && w.ID != o.ID {
			if !b.closedLocked(w.ID) {
				return false
			}
			some = true
		}
	}
	return some
}

// closedLocked reports whether flock owner id's handles are all closed
// since their last use (flushed), or their close is not told to the
// daemon (noFlush), or none is left (being released: no longer numbered,
// DropFlock) (b.mu held).
func (b *Book[F, H]) closedLocked(id uint64) bool {
	for h, hid := range b.flocks {
		if hid == id && !h.ClosedSinceUse() {
			return false
		}
	}
	return true
}
