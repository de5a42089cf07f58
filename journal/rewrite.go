package journal

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// Placer is implemented by Targets that can put a file of INTERNAL in
// place of a target, as a rewrite's recovery must (RedoReplace).
type Placer interface {
	// PlaceTarget renames name in dir over rel (relative to BACKING,
	// never through a symlink) and syncs rel's directory.
	PlaceTarget(dir *os.File, name, rel string) error
}

// settleRewrite settles a redo replace: the record's sync made the
// commit, but its staging file may not have been renamed in place yet,
// nor its bytes, owner and mode synced. They are written again, synced,
// and the file is put in place if it is not there.
func (r *recovery) settleRewrite(rec Record) {
	if f, err := r.openStaging(rec); f != nil {
		defer f.Close()
		r.placeRewrite(rec, f)
		return
	} else if err != nil {
		r.refuse(rec, "cannot open rewrite's staging file", err)
		return
	}
	f, _, ok := r.openTarget(rec) // the staging file renamed: same inode
	if !ok {
		return
	}
	defer f.Close()
	if err := rewriteAs(f, rec); err != nil {
		r.refuse(rec, "cannot rewrite target", err)
		return
	}
	r.sum.Completed++
	r.log.Info("recovery: rewrite redone", recFields(rec)...)
}

// placeRewrite writes the version into its staging file f, then renames
// it over the target.
func (r *recovery) placeRewrite(rec Record, f *os.File) {
	p, ok := r.t.(Placer)
	if !ok {
		r.refuse(rec, "rewrite: these targets cannot be replaced", nil)
		return
	}
	if err := rewriteAs(f, rec); err != nil {
		r.refuse(rec, "cannot rewrite staging file", err)
		return
	}
	if err := p.PlaceTarget(r.sub[StagingDir], rec.Staging, rec.Target); err != nil {
		r.refuse(rec, "cannot put rewrite in place", err)
		return
	}
	r.sum.Completed++
	r.log.Info("recovery: rewrite put in place", recFields(rec)...)
}

// openStaging opens rec's staging file if it is still there and is the
// record's inode; (nil, nil) if it is gone.
func (r *recovery) openStaging(rec Record) (*os.File, error) {
	d := r.sub[StagingDir]
	if d == nil {
		return nil, nil
	}
	fd, err := unix.Openat(int(d.Fd()), rec.Staging, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), d.Name()+"/"+rec.Staging)
	fi, err := f.Stat()
	if err == nil && (!fi.Mode().IsRegular() || !sameFile(fi, rec)) {
		err = errors.New("not the record's file")
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// rewriteAs makes f hold exactly rec's bytes, owner and mode, synced.
// Repeating it gives the same file.
func rewriteAs(f *os.File, rec Record) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.WriteAt(rec.Data, 0); err != nil {
		return err
	}
	fd := int(f.Fd())
	if err := unix.Fchown(fd, int(rec.UID), int(rec.GID)); err != nil && !errors.Is(err, unix.EPERM) {
		return err
	}
	if err := unix.Fchmod(fd, rec.Mode); err != nil { // after chown, which clears set-id bits
		return err
	}
	return f.Sync()
}
