package fs

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/lockbook"
	"github.com/safefs/safefs/scriptlock"
)

// Open file description locks (F_OFD_SETLK) come as fcntl locks whose
// owner is the open file, and the kernel sends no unlock for them at
// close. A process's own fcntl locks are released by the unlock at each
// of its closes (FLUSH), so an owner that locked through a handle and
// still holds a lock when the handle is released is an open file's:
// its locks end with the handle, as they would on a local file system.

// noteFcntl records where an fcntl owner's locks came from.
func (n *Node) noteFcntl(fh gofs.FileHandle, o lockbook.Owner, held bool) {
	if o.Flock {
		return
	}
	if !held {
		n.r.book.Forget(o.ID)
		return
	}
	if h, ok := fh.(*handle); ok {
		n.r.book.NoteVia(h, o.ID)
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
	for _, id := range n.r.book.TakeVia(h) {
		lk := &fuse.FileLock{End: scriptlock.MaxEnd, Typ: unix.F_UNLCK}
		if e := n.setlk(context.Background(), fh, id, lk, 0, false); e != 0 && first == 0 {
			first = e
		}
	}
	return first
}
