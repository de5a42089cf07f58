package fs

import (
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/journal"
)

// A small durable append (one kept in memory, appendbuf.go) is a redo
// record: its journal line carries the bytes, and that line's fsync is
// the commit point; the bytes are then written to the file without an
// fsync of their own (docs/design.md, crash consistency). Until a checkpoint
// makes them durable in the file (fdatasync) and ends their records,
// recovery would write them again, so a checkpoint comes before anything
// that could make that wrong: a commit that replaces, renames or removes
// a path or writes a file in place (syncLazy), the unmount, and at the
// latest redoDelay after the first pending one, or when redoMaxEntries
// or redoMaxBytes are pending. One fsync per durable append instead of
// two.
const (
	redoDelay      = time.Second
	redoMaxEntries = 256
	redoMaxBytes   = 1 << 20 // their lines stay in the journal until ended
)

// redoLog holds the redo records whose bytes are not durable in their
// files yet.
type redoLog struct {
	mu      sync.Mutex
	files   map[key]*redoFile
	entries int
	bytes   int
	timer   *time.Timer
}

type redoFile struct {
	fd      int // a dup of the file's descriptor, for its fdatasync
	entries []*journal.Entry
}

// add queues e, a redo record whose bytes were written through fd (a
// file with key k). It reports whether a checkpoint is due now.
func (l *redoLog) add(k key, fd int, e *journal.Entry, n int, checkpoint func()) (due bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.files == nil {
		l.files = map[key]*redoFile{}
	}
	rf := l.files[k]
	if rf == nil {
		dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return false, err
		}
		rf = &redoFile{fd: dup}
		l.files[k] = rf
	}
	rf.entries = append(rf.entries, e)
	l.entries++
	l.bytes += n
	if l.timer == nil {
		l.timer = time.AfterFunc(redoDelay, checkpoint)
	}
	return l.entries >= redoMaxEntries || l.bytes >= redoMaxBytes, nil
}

// redo reports whether h's pending append of n bytes is committed as a
// redo record: kept in memory, durable, not in a cluster (whose recovery
// reads a cut-off append's staging file).
func (h *handle) redo(n int64) bool {
	r := h.n.r
	return h.stage == nil && !h.newFile && n > 0 && n <= journal.MaxRedo && r.opts.Durable && !r.clustered()
}

// crashKind names rec's crash points (CrashPoints).
func crashKind(rec journal.Record) string {
	if rec.Redo() {
		return "redo"
	}
	return "append"
}

// redoQueued queues a committed redo record for its checkpoint. Without
// a descriptor to sync later, the bytes are synced now, as a plain
// append's.
func (r *root) redoQueued(k key, fd int, e *journal.Entry, n int) error {
	due, err := r.redo.add(k, fd, e, n, r.checkpoint)
	if err != nil {
		if err := unix.Fdatasync(fd); err != nil {
			// The record stays open: recovery writes the bytes again.
			r.log.Error("redo append: fdatasync failed", zap.Error(err))
			return nil
		}
		return e.CommitLazy()
	}
	if due {
		r.checkpoint()
	}
	return nil
}

// take empties l and returns what it held.
func (l *redoLog) take() map[key]*redoFile {
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

// checkpoint makes the pending redo records' bytes durable in their files
// and ends the records (lazily: the next journal fsync, or syncLazy,
// makes the ends durable). A file whose fdatasync fails keeps its
// records open, so that recovery writes their bytes again.
func (r *root) checkpoint() {
	r.ckMu.Lock()
	defer r.ckMu.Unlock()
	files := r.redo.take()
	if len(files) == 0 {
		return
	}
	synced := make(map[*redoFile]bool, len(files))
	for _, rf := range files {
		err := unix.Fdatasync(rf.fd)
		closeFd(rf.fd)
		if err != nil {
			r.log.Error("redo checkpoint: fdatasync failed; recovery at next mount writes the appends again",
				zap.Int("appends", len(rf.entries)), zap.Error(err))
			continue
		}
		synced[rf] = true
	}
	r.crash("redo-synced")
	for rf := range synced {
		for _, e := range rf.entries {
			if err := e.CommitLazy(); err != nil {
				r.log.Warn("redo checkpoint: end line not written", zap.Error(err))
			}
		}
	}
	r.crash("redo-ended")
}

// syncLazy makes durable what was committed lazily (redo bytes, lazy end
// lines), before a commit changes a file that an open record may name.
func (r *root) syncLazy() error {
	if !r.opts.Durable {
		return nil
	}
	r.checkpoint()
	return r.jr.SyncEnds()
}
