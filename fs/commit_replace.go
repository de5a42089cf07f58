package fs

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
	"github.com/safefs/safefs/journal"
)

func (h *handle) commitReplace(g grant, v named) error {
	r := h.n.r
	if err := h.carryMeta(v); err != nil {
		return err
	}
	if r.opts.Durable {
		if err := h.p.stage.Sync(); err != nil {
			return fmt.Errorf("fsync staging: %w", err)
		}
	}
	if err := g.Check(); err != nil {
		return err
	}
	// No journal record: the rename is the commit point and is atomic,
	// and a staging file left by a crash is an orphan that recovery
	// removes, so a record would add two writes (and two fsyncs) and
	// decide nothing. A record that CommitLazy ended must be durable
	// before this commit changes the file it names (SyncEnds). In a
	// cluster the record keeps the grant's fencing token (docs/design.md).
	e, err := h.replaceRecord(g)
	if err != nil {
		return err
	}
	defer e.Abort()
	st, err := backing.Fstat(int(h.p.stage.Fd()))
	if err != nil {
		return err
	}
	// Everything that can fail goes before the rename: after it the
	// commit is made and a failure could only be reported, not undone.
	syncDir := -1
	if r.opts.Durable {
		if err := r.syncLazy(); err != nil {
			return err
		}
		if syncDir, err = unix.Openat(v.dir, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
			return err
		}
		defer unix.Close(syncDir)
	}
	r.crash("replace-before-rename")
	if err := g.fence(version(st.Ino, v.st.Ino)); err != nil {
		return err
	}
	// A daemon paused right after its fence must not publish on waking
	// (a stop point for tests only: no durable step since the last one).
	r.crash("replace-fenced")
	if err := g.Check(); err != nil {
		return err
	}
	r.ids.alias(h.n.f, keyOf(&st))
	if err := backing.RenameAt(r.stagingfd, h.p.stageNm, v.dir, v.nm, 0); err != nil {
		r.ids.unalias(h.n.f, keyOf(&st))
		return err
	}
	// The new version is in place: from here on, failure to sync is
	// reported but the commit is not undone.
	r.ids.rekey(h.n.f, keyOf(&st))
	h.n.f.repin(int(h.p.stage.Fd()))
	h.setBase(h.p.stage, 0)
	h.p.taken()
	r.crash("replace-after-rename")
	if syncDir >= 0 {
		if err := v.in.f.syncDir(syncDir); err != nil {
			return fmt.Errorf("fsync directory: %w", err)
		}
	}
	r.crash("replace-dir-synced")
	return e.Commit()
}

// replaceRecord logs a replace only in a cluster, for its token: a nil
// entry (not clustered) ends as a no-op.
func (h *handle) replaceRecord(g grant) (*journal.Entry, error) {
	if !h.n.r.clustered() {
		return nil, nil
	}
	return h.n.r.jr.Begin(journal.Record{Kind: journal.Replace, Target: h.n.path(), Staging: h.p.stageNm, Rev: g.Token()})
}
