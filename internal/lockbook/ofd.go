package lockbook

// Open file description locks (F_OFD_SETLK) come as fcntl locks whose
// owner is the open file, and the kernel sends no unlock for them at
// close. A process's own fcntl locks are released by the unlock at each
// of its closes (FLUSH), so an owner that locked through a handle and
// still holds a lock when the handle is released is an open file's:
// its locks end with the handle, as they would on a local file system.

// NoteVia records that fcntl owner id locked through h and holds a lock.
func (b *Book[F, H]) NoteVia(h H, id uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.via == nil {
		b.via = map[H]map[uint64]bool{}
	}
	if b.via[h] == nil {
		b.via[h] = map[uint64]bool{}
	}
	b.via[h][id] = true
}

// Forget drops an fcntl owner that holds nothing any more.
func (b *Book[F, H]) Forget(id uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for h, ids := range b.via {
		delete(ids, id)
		if len(ids) == 0 {
			delete(b.via, h)
		}
	}
}

// TakeVia forgets and returns the fcntl owners that locked through h
// and hold a lock still: h is being released.
func (b *Book[F, H]) TakeVia(h H) []uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []uint64
	for id := range b.via[h] {
		out = append(out, id)
	}
	delete(b.via, h)
	return out
}
