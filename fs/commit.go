package fs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
	"github.com/safefs/safefs/internal/proc"
	"github.com/safefs/safefs/internal/staging"
	"github.com/safefs/safefs/journal"
	"github.com/safefs/safefs/lockmgr"
)

// commit publishes the handle's pending version under the file's lock.
// h.mu is held. On failure the previous version stays and the pending
// version is kept in rejected/ for the operator.
func (h *handle) commit() error {
	h.notePending()
	h.obsStart()
	defer h.obsEnd() // after the lock is released
	// Its file became raw meanwhile: raw from now on (raw.go).
	defer h.switchRaw()
	err := h.commitLocked()
	h.appendAgain()
	return err
}

func (h *handle) commitLocked() error {
	r := h.n.r
	defer r.changes.Begin()()
	ctx, cancel := lockContext(r)
	defer cancel()
	key := h.n.lockKey()
	held, err := r.locks.Lock(ctx, h.who(), key)
	h.obsLocked()
	if err != nil && h.pub.soft {
		h.obs = nil // neither made nor rejected: tried again (appendpub.go)
		return h.publishLater(err)
	}
	if err != nil {
		return h.reject(err)
	}
	defer held.Release()
	g := grant{held, key.Name, h}
	base := h.base
	onBase := false // the commit wrote base's own inode
	switch {
	case h.append && h.appendReplaces():
		// A passed-through reader reads the committed inode itself.
		if err = h.unappend(false); err == nil {
			err = h.commitWhole(g)
		}
	case h.append:
		onBase, err = h.commitAppend(g)
	case h.newFile:
		onBase, err = h.commitNew(g)
	default:
		err = h.commitWhole(g)
	}
	if errors.Is(err, errCloserKilled) {
		h.killedClose(h.closer)
		return nil
	}
	if err != nil {
		return h.reject(err)
	}
	h.n.f.bump()
	r.rolesCommitted(h.n.f, onBase)
	if h.base != base || onBase || h.baseIsCurrent() {
		// A replace made the staging file base, an append or an in-place
		// commit wrote base's inode: it is the version just bumped to (no
		// other commit of the file runs: we hold its lock), so the next
		// stat or read need not reopen it.
		h.baseVer = h.n.f.ver()
	}
	if !h.wrote || !r.writesUncache.Load() || h.modeDropped {
		h.n.f.uncache(h.n.EmbeddedInode())
	}
	h.modeDropped = false
	r.count.commits.Add(1)
	h.rmwCommitted()
	return nil
}

// errUnlinked: the file has no name left, so a commit has nowhere to go.
// The handle keeps its pending version as its content, as an unlinked
// file keeps its data while open.
var errUnlinked = errors.New("file has no name")

// locate finds, under the file's lock, a name that still leads to the
// backing inode the file's committed version is (no commit of it is in
// progress, so findNamed sees no other). A name that now leads elsewhere
// was changed directly in BACKING: committing there would put the
// writer's bytes in another file, so that is ESTALE; so is a directory
// moved out of BACKING. The caller releases v (v.release).
func (n *Node) locate(g grant) (v named, err error) {
	if len(n.f.nameList()) == 0 {
		return noName, errUnlinked
	}
	v, err = n.findNamed()
	if errors.Is(err, syscall.ENOENT) && n.adopt(g) {
		v, err = n.findNamed()
	}
	if errors.Is(err, syscall.ENOENT) {
		// Its names lead to other files: changed outside the mount.
		return noName, syscall.ESTALE
	}
	if err != nil {
		return noName, err
	}
	if _, err := v.in.writeDir(); err != nil {
		v.release()
		return noName, err
	}
	v.in.dropDir()
	return v, nil
}

// reopen opens the located version itself (not its name) for writing.
// The file's lock is held: another process's lease on it is
// backing.ErrLeased at once, never waited for (lease.go). Tests that need
// a commit held under its lock set SAFEFS_TEST_LEASE_WAIT: a lease they
// take is then waited for that long (a goroutine sleeping, no thread
// blocked).
func (v named) reopen(flags int) (*os.File, error) {
	fd, err := backing.ReopenFd(v.fd, flags)
	if errors.Is(err, backing.ErrLeased) && v.in.r.testLeaseWait > 0 {
		w := backing.LeaseWaiter{Limit: v.in.r.testLeaseWait}
		for errors.Is(err, backing.ErrLeased) && w.Again(context.Background()) {
			fd, err = backing.ReopenFd(v.fd, flags)
		}
	}
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), v.nm), nil
}

// reject keeps the pending bytes of a commit that could not be made in
// rejected/ (within its bounds, see keep), and maps the reason to the
// documented errno. A commit that failed after its rename has nothing
// left to keep. One line is logged, at most a few per interval.
func (h *handle) reject(why error) error {
	r := h.n.r
	if h.stage == nil && len(h.buf) == 0 && !h.newFile {
		// Failed after its rename: the new version is in place, but
		// its directory's fsync failed: it may not survive a crash.
		r.log.Error("commit made but not durable", zap.String("path", logPath(h.n.path())), zap.Error(why))
		return lockErrno(why)
	}
	r.count.rejected.Add(1)
	kept := h.keep()
	h.obsRejected(why, kept)
	if ok, skipped := r.rejectLog.Allow(); ok {
		r.log.Warn("commit rejected, previous version kept", zap.String("path", logPath(h.n.path())), zap.Error(why),
			zap.String("kept_in", keptWhere(kept)), zap.Uint32("uid", h.uid), zap.Int("not_logged_before", skipped))
	}
	return lockErrno(why)
}

func keptWhere(nm string) string {
	if nm == "" {
		return "(dropped: rejected/ is full)"
	}
	return journal.RejectedDir + "/" + nm
}

// commitWhole publishes the staging file: by rename when the file has one
// name, in place (with an undo copy) when it has several, so hard links
// stay one file, or when it is raw, so that the handles serving it in
// place stay on it (raw.go).
func (h *handle) commitWhole(g grant) error {
	v, err := h.n.locate(g)
	if errors.Is(err, errUnlinked) {
		h.dirty = false
		return nil
	}
	if err != nil {
		return err
	}
	defer v.release()
	if v.st.Nlink > 1 || h.n.f.isRaw() {
		h.obsKind(KindInPlace)
		return h.commitInPlace(g, v)
	}
	return h.commitReplace(g, v)
}

func (h *handle) commitReplace(g grant, v named) error {
	r := h.n.r
	if err := h.carryMeta(v); err != nil {
		return err
	}
	if r.opts.Durable {
		if err := h.stage.Sync(); err != nil {
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
	st, err := backing.Fstat(int(h.stage.Fd()))
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
	if err := backing.RenameAt(r.stagingfd, h.stageNm, v.dir, v.nm, 0); err != nil {
		r.ids.unalias(h.n.f, keyOf(&st))
		return err
	}
	// The new version is in place: from here on, failure to sync is
	// reported but the commit is not undone.
	r.ids.rekey(h.n.f, keyOf(&st))
	h.n.f.repin(int(h.stage.Fd()))
	h.setBase(h.stage, 0)
	h.stage, h.stageNm, h.dirty = nil, "", false
	h.staged.Store(0)
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
	return h.n.r.jr.Begin(journal.Record{Kind: journal.Replace, Target: h.n.path(), Staging: h.stageNm, Rev: g.Token()})
}

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
	h.discard()
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
	if err := staging.CopyData(target, h.stage); err != nil {
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

// commitAppend writes the pending appends at the end of the file in
// place. It reports whether it wrote through base (then the version
// committed).
func (h *handle) commitAppend(g grant) (onBase bool, err error) {
	r := h.n.r
	v, err := h.locateBase(g)
	if errors.Is(err, errUnlinked) {
		h.dirty = false
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer v.release()
	target, st, onBase, err := h.appendTarget(v)
	if err != nil {
		return false, err
	}
	if !onBase {
		defer target.Close()
	}
	if h.newFile && (!onBase || st.Size != 0) {
		// Not the empty file its create made: changed in BACKING.
		return false, syscall.ESTALE
	}
	fd := int(target.Fd())
	n, crc, err := h.pendingAppend()
	if err != nil {
		return false, err
	}
	if err := g.Check(); err != nil {
		return false, err
	}
	rec := journal.Record{Kind: journal.Append, Target: h.n.path(), Dev: uint64(st.Dev), Ino: st.Ino,
		OldSize: st.Size, Len: n, CRC: crc, Rev: g.Token()}
	if r.clustered() {
		// Recovery tells its own partial bytes from other daemons'
		// appends by them (journal settleAppend).
		rec.Staging = h.stageNm
	}
	if h.redo(n) {
		rec.Kind, rec.Data = journal.RedoAppend, h.buf
	}
	at := crashKind(rec)
	e, err := r.jr.Begin(rec)
	if err != nil {
		return false, err
	}
	if err := h.dropSetID(target, &st); err != nil {
		return false, h.undoAppend(e, fd, st.Size, err)
	}
	r.crash(at + "-begun")
	if err := g.fence(""); err != nil {
		// Not ours any more: another daemon may be appending now, so
		// the file is left alone (no cut back).
		_ = e.Abort()
		return false, err
	}
	err = h.writeAppend(target, st.Size, n, g, at)
	if err == nil {
		r.crash(at + "-written")
		if rec.Redo() {
			// Committed: the record is durable with the bytes.
			h.discard()
			return onBase, r.redoQueued(keyOf(&st), fd, e, int(n))
		}
		if r.opts.Durable {
			err = unix.Fdatasync(fd)
		}
	}
	if err != nil {
		return false, h.undoAppend(e, fd, st.Size, err)
	}
	r.crash("append-synced")
	// The appended bytes are durable: an open record would verify them
	// by CRC and keep them, so its end line need not be (yet). Not in a
	// cluster: other daemons' renames of the path do not wait for it.
	if r.clustered() {
		err = e.Commit()
	} else {
		err = e.CommitLazy()
	}
	r.crash("append-ended")
	h.discard()
	return onBase, err
}

// locateBase is locate for a commit that writes through the handle's
// own base: when base is the committed version and a name of the file
// still leads to it, a stat of the name checks it and no O_PATH fd is
// opened (v.fd is -1, v.st base's stat): two system calls fewer per
// append. Otherwise, as locate.
func (h *handle) locateBase(g grant) (named, error) {
	if h.base == nil || !h.write || h.private || h.n.r.clustered() {
		return h.n.locate(g)
	}
	bs, err := backing.Fstat(int(h.base.Fd()))
	if err != nil || !h.n.r.ids.owns(h.n.f, keyOf(&bs)) {
		return h.n.locate(g)
	}
	v, ok := h.n.statName(func(_ name, st *unix.Stat_t) bool { return keyOf(st) == keyOf(&bs) })
	if !ok {
		return h.n.locate(g)
	}
	if _, err := v.in.writeDir(); err != nil {
		return noName, err
	}
	v.in.dropDir()
	v.st = bs
	return v, nil
}

// appendTarget opens the located version for writing, with its stat. A
// writer's base is open for writing and follows the committed version:
// when it is v's inode it serves, saving an open through /proc. onBase
// tells the caller not to close it.
func (h *handle) appendTarget(v named) (target *os.File, st unix.Stat_t, onBase bool, err error) {
	if v.fd < 0 {
		return h.base, v.st, true, nil // located through base (locateBase)
	}
	if h.base != nil && h.write && !h.private {
		st, err = backing.Fstat(int(h.base.Fd()))
		if err == nil && keyOf(&st) == keyOf(&v.st) {
			return h.base, st, true, nil
		}
	}
	target, err = v.reopen(unix.O_WRONLY)
	if err != nil {
		return nil, st, false, err
	}
	st, err = backing.Fstat(int(target.Fd()))
	if err != nil {
		target.Close()
		return nil, st, false, err
	}
	return target, st, false, nil
}

// pendingAppend returns the size and CRC of the pending appends, after
// checking there is room for the daemon to write them for the handle's
// user.
func (h *handle) pendingAppend() (int64, uint32, error) {
	if h.stage == nil {
		n := int64(len(h.buf))
		return n, journal.Checksum(h.buf), h.n.r.roomFor(h.uid, n)
	}
	ps, err := backing.Fstat(int(h.stage.Fd()))
	if err != nil {
		return 0, 0, err
	}
	if err := h.n.r.roomFor(h.uid, ps.Blocks*512); err != nil {
		return 0, 0, err
	}
	crc, err := journal.CRC(h.stage, 0, ps.Size)
	return ps.Size, crc, err
}

// writeAppend writes the n pending bytes at the end of target (at size).
// Buffered bytes (at most appendBufMax), and staged ones up to
// appendAtomicMax (an appender's published lines: appendpub.go), are
// written under f.inPlace, so readers through the mount see all of them
// or none.
func (h *handle) writeAppend(target *os.File, size, n int64, g grant, at string) error {
	if h.stage == nil || n <= appendAtomicMax {
		h.n.f.inPlace.Lock()
		defer h.n.f.inPlace.Unlock()
	}
	if h.n.r.crashAt == at+"-half" || h.n.r.atPoint.Load() != nil {
		_ = h.copyAppendPart(target, size, 0, n/2)
		h.n.r.crash(at + "-half")
	}
	return h.copyAppend(target, size, n, g)
}

// appendChunk is how much an append copies between checks that its
// closer is still alive.
const appendChunk = 64 << 20

// errCloserKilled: the process whose close() commits was killed meanwhile.
var errCloserKilled = errors.New("writer killed by a signal during its commit")

// copyAppend copies the n pending bytes to the end of target (at size),
// giving up if the closing process is killed meanwhile: a killed writer
// does not commit, and must not keep the lock while a long copy runs.
// A cluster lock is fenced again before each chunk, so that a long copy
// does not outlive the lease's margin.
func (h *handle) copyAppend(target *os.File, size, n int64, g grant) error {
	for off := int64(0); off < n; off += appendChunk {
		if off > 0 && h.closer != 0 && h.n.r.opts.KillCheck && proc.KilledBySignal(h.closer) {
			return errCloserKilled
		}
		if off > 0 && h.n.r.clustered() {
			if err := g.fence(""); err != nil {
				return err
			}
		}
		if err := h.copyAppendPart(target, size+off, off, min(appendChunk, n-off)); err != nil {
			return err
		}
	}
	return nil
}

// copyAppendPart writes n pending bytes from src on, at dst in target:
// from the buffer or the staging file.
func (h *handle) copyAppendPart(target *os.File, dst, src, n int64) error {
	if h.stage != nil {
		return staging.CopyRange(target, dst, h.stage, src, n)
	}
	_, err := target.WriteAt(h.buf[src:src+n], dst)
	return err
}

// lockContext bounds a lock wait by lock_timeout. It is not the request's
// context: go-fuse cancels that on any signal, SIGURG included.
// Only etcd's locks need it: the local lock manager has the same timeout
// and starts its timer only when a lock must wait, so an uncontended
// commit starts none (a timer may also wake the runtime's poller).
func lockContext(r *root) (context.Context, context.CancelFunc) {
	if !r.clustered() {
		return context.Background(), func() {}
	}
	return context.WithTimeout(context.Background(), r.opts.LockTimeout)
}

// lockErrno maps a failed lock wait to the documented errno.
func lockErrno(err error) error {
	if e, ok := clusterErrno(err); ok {
		return e
	}
	switch {
	case errors.Is(err, lockmgr.ErrTooManyWaiters):
		return syscall.EAGAIN
	case errors.Is(err, lockmgr.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return syscall.ETIMEDOUT
	}
	return err
}

// undoAppend cuts a failed append back. If even that fails, the record
// stays open so that the next recovery cuts it back.
func (h *handle) undoAppend(e *journal.Entry, fd int, size int64, why error) error {
	if err := unix.Ftruncate(fd, size); err != nil {
		h.n.r.log.Error("append failed and could not be cut back; recovery at next mount will",
			zap.String("path", h.n.path()), zap.Error(err))
		return why
	}
	_ = e.Abort()
	return why
}
