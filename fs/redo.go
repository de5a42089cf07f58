package fs

import (
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/redo"
	"github.com/safefs/safefs/journal"
)

// A small durable append (one kept in memory, appendbuf.go) is a redo
// record: its journal line carries the bytes, and that line's fsync is
// the commit point; the bytes are then written to the file without an
// fsync of their own. The records wait in a queue (internal/redo, which
// says when a checkpoint comes) until a checkpoint makes their bytes
// durable in the file and ends them.

// redo reports whether h's pending append of n bytes is committed as a
// redo record: kept in memory, durable, not in a cluster (whose recovery
// reads a cut-off append's staging file).
func (h *handle) redo(n int64) bool {
	r := h.n.r
	return h.p.stage == nil && !h.p.newFile && n > 0 && n <= journal.MaxRedo && r.opts.Durable && !r.clustered()
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
	due, err := r.redo.Add(k, fd, e, n, r.checkpoint)
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

// checkpoint makes the pending redo records' bytes durable in their files
// and ends the records (lazily: the next journal fsync, or syncLazy,
// makes the ends durable). A file whose fdatasync fails keeps its
// records open, so that recovery writes their bytes again.
func (r *root) checkpoint() {
	r.ckMu.Lock()
	defer r.ckMu.Unlock()
	files := r.redo.Take()
	if len(files) == 0 {
		return
	}
	synced := make(map[*redo.File]bool, len(files))
	for _, rf := range files {
		err := unix.Fdatasync(rf.Fd)
		closeFd(rf.Fd)
		if err != nil {
			r.log.Error("redo checkpoint: fdatasync failed; recovery at next mount writes the appends again",
				zap.Int("appends", len(rf.Entries)), zap.Error(err))
			continue
		}
		synced[rf] = true
	}
	r.crash("redo-synced")
	for rf := range synced {
		for _, e := range rf.Entries {
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
