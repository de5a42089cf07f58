package journal

import (
	"bytes"
	"errors"
	"os"
	"syscall"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// settle finishes or undoes one cut-off commit. Its error means INTERNAL
// failed; trouble with the target is counted as refused instead.
func (r *recovery) settle(rec Record) error {
	switch rec.Kind {
	case Replace:
		return r.settleReplace(rec)
	case Append, RedoAppend:
		r.settleAppend(rec)
		return nil
	case InPlace:
		return r.settleInPlace(rec)
	}
	return nil
}

// settleReplace: the rename of the staging file is the commit point, so a
// staging file still present means the target was never touched.
func (r *recovery) settleReplace(rec Record) error {
	var typ uint32
	d := r.sub[StagingDir]
	if d != nil {
		var err error
		if typ, err = typeAt(d, rec.Staging); err != nil {
			return err
		}
	}
	switch typ {
	case 0:
		r.sum.Completed++
		r.log.Info("recovery: replace had committed", recFields(rec)...)
	case unix.S_IFREG:
		if err := unlinkat(d, rec.Staging); err != nil {
			return err
		}
		r.sum.RolledBack++
		r.log.Info("recovery: replace rolled back", recFields(rec)...)
	default:
		r.refuse(rec, "staging entry is not a regular file", nil)
	}
	return nil
}

// settleAppend keeps the appended bytes only if all of them verify, and
// never cuts the target below its size before the append.
func (r *recovery) settleAppend(rec Record) {
	f, size, ok := r.openTarget(rec)
	if !ok {
		return
	}
	defer f.Close()
	if rec.Redo() {
		r.redoAppend(rec, f, size)
		return
	}
	if size == rec.OldSize+rec.Len {
		sum, err := CRC(f, rec.OldSize, rec.Len)
		if err != nil {
			r.refuse(rec, "cannot read appended bytes", err)
			return
		}
		if sum == rec.CRC {
			r.done(rec, f, &r.sum.Completed, "append complete")
			return
		}
	}
	if size > rec.OldSize && sharedTargets(r.t) && !r.ownBytes(rec, f, size) {
		// Other daemons appended after this one was cut off: cutting
		// back would remove their committed bytes too.
		r.refuse(rec, "append: other daemons appended since; not cut back", nil)
		return
	}
	if size <= rec.OldSize {
		r.sum.RolledBack++
		r.log.Info("recovery: append had written nothing", recFields(rec)...)
		return
	}
	if err := f.Truncate(rec.OldSize); err != nil {
		r.refuse(rec, "cannot truncate target", err)
		return
	}
	r.done(rec, f, &r.sum.RolledBack, "append rolled back")
}

// redoAppend settles a redo record: it was committed when it became
// durable, its bytes perhaps not yet, so they are written again (the
// same bytes at the same place: repeating it changes nothing). Bytes
// past them are later appends' and stay. A file shorter than before the
// append was cut outside safefs: it is left alone.
func (r *recovery) redoAppend(rec Record, f *os.File, size int64) {
	if size < rec.OldSize {
		r.refuse(rec, "append: the file is shorter than before it; not redone", nil)
		return
	}
	if size >= rec.OldSize+rec.Len {
		if sum, err := CRC(f, rec.OldSize, rec.Len); err == nil && sum == rec.CRC {
			r.done(rec, f, &r.sum.Completed, "append complete")
			return
		}
	}
	if _, err := f.WriteAt(rec.Data, rec.OldSize); err != nil {
		r.refuse(rec, "cannot redo append", err)
		return
	}
	r.done(rec, f, &r.sum.Completed, "append redone")
}

// ownBytes reports whether everything past the append's old size is a
// prefix of its own pending bytes (its staging file, which recovery has
// not swept yet): then no other daemon appended after it, and cutting
// back removes only its own partial append. Unknown counts as not.
func (r *recovery) ownBytes(rec Record, f *os.File, size int64) bool {
	n := size - rec.OldSize
	d := r.sub[StagingDir]
	if rec.Staging == "" || d == nil || n > rec.Len {
		return false
	}
	fd, err := unix.Openat(int(d.Fd()), rec.Staging, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	st := os.NewFile(uintptr(fd), rec.Staging)
	defer st.Close()
	a, b := make([]byte, 64<<10), make([]byte, 64<<10)
	for off := int64(0); off < n; off += int64(len(a)) {
		k := int(min(int64(len(a)), n-off))
		if _, err := f.ReadAt(a[:k], rec.OldSize+off); err != nil {
			return false
		}
		if _, err := st.ReadAt(b[:k], off); err != nil || !bytes.Equal(a[:k], b[:k]) {
			return false
		}
	}
	return true
}

// done fsyncs the settled target, then counts it.
func (r *recovery) done(rec Record, f *os.File, counter *int, msg string) {
	if err := f.Sync(); err != nil {
		r.refuse(rec, "cannot fsync target", err)
		return
	}
	*counter++
	r.log.Info("recovery: "+msg, recFields(rec)...)
}

// settleInPlace: the commit removes the undo file once the target is
// written, so a missing undo file means committed, and a present one is
// copied back, but only if it verifies.
func (r *recovery) settleInPlace(rec Record) error {
	uf, err := r.openUndo(rec)
	if errors.Is(err, unix.ELOOP) {
		r.refuse(rec, "undo entry is a symlink", nil)
		return nil
	}
	if err != nil {
		return err
	}
	if uf == nil {
		return r.undoMissing(rec)
	}
	defer uf.Close()
	ok, err := r.undoVerifies(rec, uf)
	if err != nil || !ok {
		return err
	}
	f, _, ok := r.openTarget(rec)
	if !ok {
		return r.setAside(rec)
	}
	defer f.Close()
	if err := restore(f, uf, rec.UndoSize); err != nil {
		r.refuse(rec, "cannot restore target", err)
		return r.setAside(rec)
	}
	if err := unlinkat(r.sub[UndoDir], rec.Undo); err != nil {
		return err
	}
	r.sum.RolledBack++
	r.log.Info("recovery: inplace rolled back", recFields(rec)...)
	return nil
}

func (r *recovery) openUndo(rec Record) (*os.File, error) {
	d := r.sub[UndoDir]
	if d == nil {
		return nil, nil
	}
	fd, err := unix.Openat(int(d.Fd()), rec.Undo, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: d.Name() + "/" + rec.Undo, Err: err}
	}
	return os.NewFile(uintptr(fd), d.Name()+"/"+rec.Undo), nil
}

// undoMissing: committed, unless an earlier run set the undo file aside.
func (r *recovery) undoMissing(rec Record) error {
	if rej := r.sub[RejectedDir]; rej != nil {
		typ, err := typeAt(rej, asideName(rec))
		if err != nil {
			return err
		}
		if typ != 0 {
			r.refuse(rec, "undo file was set aside earlier", nil)
			return nil
		}
	}
	r.sum.Completed++
	r.log.Info("recovery: inplace had committed", recFields(rec)...)
	return nil
}

// undoVerifies checks size and CRC. A bad undo file would corrupt the
// target, so it is set aside and the target left as it is.
func (r *recovery) undoVerifies(rec Record, uf *os.File) (bool, error) {
	fi, err := uf.Stat()
	if err != nil {
		return false, err
	}
	if !fi.Mode().IsRegular() {
		r.refuse(rec, "undo entry is not a regular file", nil)
		return false, nil
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
		r.refuse(rec, "undo file is not the daemon's own", nil)
		return false, nil
	}
	if fi.Size() == rec.UndoSize {
		sum, err := CRC(uf, 0, rec.UndoSize)
		if err != nil {
			return false, err
		}
		if sum == rec.UndoCRC {
			return true, nil
		}
	}
	r.refuse(rec, "undo file does not verify", nil)
	return false, r.setAside(rec)
}

func asideName(rec Record) string { return "undo-" + rec.Undo }

// setAside moves an undo file that recovery cannot use into rejected/:
// left in undo/ it would be swept as an orphan once the journal is empty.
// If it cannot be moved, it stays in undo/ and this run does not sweep it.
func (r *recovery) setAside(rec Record) error {
	rej, name := r.sub[RejectedDir], asideName(rec)
	if rej != nil && len(name) <= maxName {
		err := unix.Renameat2(int(r.sub[UndoDir].Fd()), rec.Undo, int(rej.Fd()), name, unix.RENAME_NOREPLACE)
		if err == nil {
			r.log.Error("recovery: undo file set aside", append(recFields(rec),
				zap.String("path", rej.Name()+"/"+name))...)
			return nil
		}
		r.log.Warn("recovery: cannot set undo file aside", append(recFields(rec), zap.Error(err))...)
	}
	r.keep[rec.Undo] = true
	return nil
}

// openTarget opens the target through Targets and checks it is still the
// file the record names.
func (r *recovery) openTarget(rec Record) (*os.File, int64, bool) {
	f, err := r.t.OpenTarget(rec.Target)
	if err != nil {
		r.refuse(rec, "cannot open target", err)
		return nil, 0, false
	}
	fi, err := f.Stat()
	var why string
	switch {
	case err != nil:
		why = "cannot stat target"
	case !fi.Mode().IsRegular():
		why = "target is not a regular file"
	case !sameFile(fi, rec):
		why = "target is another file now (inode number differs)"
	default:
		return f, fi.Size(), true
	}
	f.Close()
	r.refuse(rec, why, err)
	return nil, 0, false
}

// sameFile compares inode numbers only: the device number changes when
// the file system is attached elsewhere (an image restored, another loop
// or device-mapper number after a reboot), the inode number does not.
func sameFile(fi os.FileInfo, rec Record) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && uint64(st.Ino) == rec.Ino
}

func (r *recovery) refuse(rec Record, why string, err error) {
	r.sum.Refused++
	r.log.Error("recovery: refused "+why, append(recFields(rec), zap.Error(err))...)
}

// restore makes dst a copy of the n bytes of src and fsyncs it. dst is
// emptied first and only src's data runs are written, so a sparse undo
// copy stays sparse. Repeating it gives the same result.
func restore(dst, src *os.File, n int64) error {
	if err := dst.Truncate(0); err != nil {
		return err
	}
	buf := make([]byte, min(n, chunk))
	for off := int64(0); off < n; {
		data, hole := dataRun(src, off, n)
		for off = data; off < hole; {
			k := min(hole-off, int64(len(buf)))
			m, err := src.ReadAt(buf[:k], off)
			if int64(m) < k {
				return err
			}
			if _, err := dst.WriteAt(buf[:k], off); err != nil {
				return err
			}
			off += k
		}
		off = hole
	}
	if err := dst.Truncate(n); err != nil {
		return err
	}
	return dst.Sync()
}
