// Package redo queues the journal's redo records until their
// checkpoint (fs's redo.go).
package redo

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/journal"
)

// A small durable append (one kept in memory, fs's appendbuf.go) is a
// redo record: its journal line carries the bytes, and that line's
// fsync is the commit point; the bytes are then written to the file
// without an fsync of their own (docs/design.md, crash consistency).
// Until a checkpoint makes them durable in the file (fdatasync) and ends
// their records, recovery would write them again, so a checkpoint comes
// before anything that could make that wrong: a commit that replaces,
// renames or removes a path or writes a file in place (fs's syncLazy),
// the unmount, and at the latest Delay after the first pending one, or
// when MaxEntries or MaxBytes are pending. One fsync per durable append
// instead of two.
const (
	Delay      = time.Second
	MaxEntries = 256
	MaxBytes   = 1 << 20 // their lines stay in the journal until ended
)

// Queue holds the redo records whose bytes are not durable in their
// files yet, by file (K: the file's backing inode). The zero value is
// empty.
type Queue[K comparable] struct {
	mu      sync.Mutex
	files   map[K]*File
	entries int
	bytes   int
	timer   *time.Timer
}

// File is a file's queued records.
type File struct {
	Fd      int // a dup of the file's descriptor, for its fdatasync
	Entries []*journal.Entry
}

// Add queues e, a redo record whose bytes were written through fd (a
// file with key k), and calls checkpoint Delay after the first record
// queued. It reports whether a checkpoint is due now.
func (l *Queue[K]) Add(k K, fd int, e *journal.Entry, n int, checkpoint func()) (due bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.files == nil {
		l.files = map[K]*File{}
	}
	rf := l.files[k]
	if rf == nil {
		dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return false, err
		}
		rf = &File{Fd: dup}
		l.files[k] = rf
	}
	rf.Entries = append(rf.Entries, e)
	l.entries++
	l.bytes += n
	if l.timer == nil {
		l.timer = time.AfterFunc(Delay, checkpoint)
	}
	return l.entries >= MaxEntries || l.bytes >= MaxBytes, nil
}

// Take empties l and returns what it held.
func (l *Queue[K]) Take() map[K]*File {
	l.mu.Lock()
	defer l.mu.Unlock()
	files := l.files
	l.files, l.entries, l.bytes = nil, 0, 0
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	return files
}

// Len is the number of records queued.
func (l *Queue[K]) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.entries
}
