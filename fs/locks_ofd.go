package fs

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/scriptlock"
)

// Open file description locks (F_OFD_SETLK) come as fcntl locks whose
// owner is the open file, and the kernel sends no unlock for them at
// close. A process's own fcntl locks are released by the unlock at each
// of its closes (FLUSH), so an owner that locked through a handle and
// still holds a lock when the handle is released is an open file's:
// its locks end with the handle, as they would on a local file system.

// ofdOwners are, per handle, the fcntl owners that locked through it
// and hold a lock still.
type ofdOwners map[*handle]map[uint64]bool

func (b *lockBook) noteVia(h *handle, id uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.via == nil {
		b.via = ofdOwners{}
	}
	if b.via[h] == nil {
		b.via[h] = map[uint64]bool{}
	}
	b.via[h][id] = true
}

// forget drops an fcntl owner that holds nothing any more.
func (b *lockBook) forget(id uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for h, ids := range b.via {
		delete(ids, id)
		if len(ids) == 0 {
			delete(b.via, h)
		}
	}
}

func (b *lockBook) takeVia(h *handle) []uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []uint64
	for id := range b.via[h] {
		out = append(out, id)
	}
	delete(b.via, h)
	return out
}

// noteFcntl records where an fcntl owner's locks came from.
func (n *Node) noteFcntl(fh gofs.FileHandle, o lockOwner, held bool) {
	if o.flock {
		return
	}
	if !held {
		n.r.book.forget(o.id)
		return
	}
	if h, ok := fh.(*handle); ok {
		n.r.book.noteVia(h, o.id)
	}
}

// releaseOFD ends the fcntl locks still held by owners that locked
// through a handle being released.
func (n *Node) releaseOFD(fh gofs.FileHandle) syscall.Errno {
	h, ok := fh.(*handle)
	if !ok {
		return 0
	}
	var first syscall.Errno
	for _, id := range n.r.book.takeVia(h) {
		lk := &fuse.FileLock{End: scriptlock.MaxEnd, Typ: unix.F_UNLCK}
		if e := n.setlk(context.Background(), fh, id, lk, 0, false); e != 0 && first == 0 {
			first = e
		}
	}
	return first
}
