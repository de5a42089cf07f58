package fs

import (
	"os"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
	"github.com/safefs/safefs/internal/staging"
	"github.com/safefs/safefs/journal"
)

func (h *handle) commitInPlace(g grant, v named) error {
	r := h.n.r
	target, err := v.reopen(unix.O_RDWR)
	if err != nil {
		return err
	}
	defer target.Close()
	st, err := backing.Fstat(int(target.Fd()))
	if err != nil {
		return err
	}
	if err := h.roomForCopy(target); err != nil {
		return err
	}
	undo, undoNm, err := staging.NewTemp(r.undofd)
	if err != nil {
		return err
	}
	settled := false // the undo copy and the record go once the target is settled
	defer func() {
		if settled {
			r.dropTemp(r.undofd, undo, undoNm)
		} else {
			undo.Close()
		}
	}()
	if err := staging.CopyData(undo, target); err != nil {
		settled = true
		return err
	}
	if err := undo.Sync(); err != nil {
		settled = true
		return err
	}
	crc, err := journal.CRC(undo, 0, st.Size)
	if err == nil {
		err = g.Check()
	}
	if err != nil {
		settled = true
		return err
	}
	r.crash("inplace-undo-saved")
	r.checkpoint() // no redo record may outlive a write in place (redo.go)
	e, err := r.jr.Begin(journal.Record{Kind: journal.InPlace, Target: h.n.path(), Dev: uint64(st.Dev), Ino: st.Ino,
		Undo: undoNm, UndoSize: st.Size, UndoCRC: crc, Rev: g.Token()})
	if err != nil {
		settled = true
		return err
	}
	r.crash("inplace-begun")
	if err := g.fence(""); err != nil {
		settled = true
		_ = e.Abort()
		return err
	}
	if err := h.writeInPlace(target, &st); err != nil {
		if rerr := staging.CopyData(target, undo); rerr != nil {
			// Keep the record and the undo copy: the next recovery restores.
			r.log.Error("in-place commit failed and could not be undone; recovery at next mount will",
				zap.String("path", h.n.path()), zap.Error(rerr))
			return err
		}
		settled = true
		_ = e.Abort()
		return err
	}
	settled = true
	r.crash("inplace-written")
	// The record ends first: what follows is cleanup, and a crash there
	// leaves orphans that recovery sweeps, never an undo to replay.
	err = e.Commit()
	r.crash("inplace-ended")
	h.p.discard(h.n.r)
	return err
}

func (h *handle) writeInPlace(target *os.File, st *unix.Stat_t) error {
	r := h.n.r
	if err := h.dropSetID(target, st); err != nil {
		return err
	}
	if err := unix.Ftruncate(int(target.Fd()), 0); err != nil {
		return err
	}
	r.crash("inplace-truncated")
	if err := staging.CopyData(target, h.p.stage); err != nil {
		return err
	}
	if r.opts.Durable {
		return target.Sync()
	}
	return nil
}

// dropSetID takes set-uid (and set-gid) off a target written in place by a
// non-root writer, before its content changes: the daemon writes as root,
// so the kernel would not, and a set-uid root file holding a user's bytes
// must never exist, not even for the length of the copy.
func (h *handle) dropSetID(target *os.File, st *unix.Stat_t) error {
	if mode := h.keptMode(st.Mode); mode != st.Mode&07777 {
		h.modeDropped = true
		return unix.Fchmod(int(target.Fd()), mode)
	}
	return nil
}
