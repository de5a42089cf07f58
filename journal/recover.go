package journal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Targets opens commit targets for recovery. It is provided by fs/.
type Targets interface {
	// OpenTarget opens rel (relative to BACKING) read-write, without
	// following symlinks and without leaving BACKING; it fails for anything
	// but a regular file. The file must not be opened with O_APPEND.
	OpenTarget(rel string) (*os.File, error)
}

// SharedTargets is implemented by Targets that other writers (daemons of
// a cluster) commit to as well: an append record's file that grew past
// the record is then left as it is rather than cut back.
type SharedTargets interface {
	Targets
	Shared() bool
}

func sharedTargets(t Targets) bool {
	s, ok := t.(SharedTargets)
	return ok && s.Shared()
}

// recovery holds INTERNAL open by file descriptor, so that no step can be
// redirected by a symlink swapped in under INTERNAL.
type recovery struct {
	t       Targets
	log     *zap.Logger
	dir     *os.File            // INTERNAL (the caller's)
	journal *os.File            // nil: no journal (fresh)
	sub     map[string]*os.File // StagingDir, UndoDir, RejectedDir; nil if missing
	keep    map[string]bool     // undo files to leave in place this run
	sum     Summary
}

// Recover settles the commits a crash cut off, removes orphan staging and
// undo files, and empties the journal. dir is INTERNAL, opened and checked
// by the caller (it must be the daemon's own: recovery trusts what is in
// it). Every step is idempotent, so a recovery that is itself cut off can
// simply run again. It fails only when INTERNAL itself cannot be read or
// written; trouble with a target is logged and counted in Summary.Refused.
func Recover(dir *os.File, t Targets, log *zap.Logger) (Summary, error) {
	if log == nil {
		log = zap.NewNop()
	}
	r, err := openRecovery(dir, t, log)
	if err != nil {
		return Summary{}, err
	}
	defer r.close()
	if err := r.run(); err != nil {
		return r.sum, err
	}
	log.Info("recovery done", zap.Int("records", r.sum.Records), zap.Int("completed", r.sum.Completed),
		zap.Int("rolled_back", r.sum.RolledBack), zap.Int("orphans", r.sum.Orphans),
		zap.Int("refused", r.sum.Refused), zap.Int("torn", r.sum.Torn))
	return r.sum, nil
}

func (r *recovery) run() error {
	cut, err := r.read()
	if err != nil {
		return err
	}
	for _, rec := range cut {
		if err := r.settle(rec); err != nil {
			return err
		}
	}
	if err := r.sweep(); err != nil {
		return err
	}
	return r.finish()
}

func openRecovery(dir *os.File, t Targets, log *zap.Logger) (*recovery, error) {
	r := &recovery{t: t, log: log, dir: dir, sub: map[string]*os.File{}, keep: map[string]bool{}}
	if err := r.openParts(); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

func (r *recovery) openParts() error {
	var err error
	r.journal, err = r.openat(journalName, unix.O_RDWR|unix.O_NONBLOCK)
	if err != nil {
		return err
	}
	if r.journal != nil {
		if fi, err := r.journal.Stat(); err != nil || !fi.Mode().IsRegular() {
			return fmt.Errorf("journal: %s is not a regular file", r.journal.Name())
		}
	}
	for _, name := range []string{StagingDir, UndoDir, RejectedDir} {
		if r.sub[name], err = r.openat(name, unix.O_RDONLY|unix.O_DIRECTORY); err != nil {
			return err
		}
	}
	return nil
}

// openat opens a name directly in INTERNAL, never through a symlink.
// A missing name is (nil, nil).
func (r *recovery) openat(name string, flags int) (*os.File, error) {
	fd, err := unix.Openat(int(r.dir.Fd()), name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	path := filepath.Join(r.dir.Name(), name)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

func (r *recovery) close() {
	for _, f := range r.sub {
		if f != nil {
			f.Close()
		}
	}
	if r.journal != nil {
		r.journal.Close()
	}
}

// read returns the cut-off records that still matter, in journal order.
func (r *recovery) read() ([]Record, error) {
	if r.journal == nil {
		return nil, nil
	}
	fi, err := r.journal.Stat()
	if err != nil {
		return nil, err
	}
	s, err := scan(io.NewSectionReader(r.journal, 0, fi.Size()), r.log)
	if err != nil {
		return nil, err
	}
	r.sum.Records = s.records
	r.sum.Refused += s.refused
	r.sum.Torn = s.torn
	return s.cut(), nil
}

// sweep removes the regular files left in staging/ and undo/: with the
// journal settled, no commit needs them. Anything else is left alone.
func (r *recovery) sweep() error {
	// A compaction cut off: the journal itself is the whole truth.
	if err := unlinkat(r.dir, compactName); err != nil {
		return err
	}
	for _, name := range []string{StagingDir, UndoDir} {
		d := r.sub[name]
		if d == nil {
			continue
		}
		names, err := d.Readdirnames(-1)
		if err != nil {
			return err
		}
		for _, n := range names {
			if err := r.sweepOne(d, name, n); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *recovery) sweepOne(d *os.File, dirName, n string) error {
	if dirName == UndoDir && r.keep[n] {
		return nil
	}
	typ, err := typeAt(d, n)
	if err != nil || typ == 0 {
		return err
	}
	if typ != unix.S_IFREG {
		r.log.Warn("recovery: not a regular file, left alone", zap.String("dir", dirName), zap.String("name", n))
		return nil
	}
	if err := unlinkat(d, n); err != nil {
		return err
	}
	r.sum.Orphans++
	r.log.Info("recovery: removed orphan", zap.String("dir", dirName), zap.String("name", n))
	return nil
}

// finish makes the removals durable, then forgets the settled journal.
func (r *recovery) finish() error {
	for _, name := range []string{StagingDir, UndoDir, RejectedDir} {
		if d := r.sub[name]; d != nil {
			if err := d.Sync(); err != nil {
				return err
			}
		}
	}
	if err := r.dir.Sync(); err != nil {
		return err
	}
	if r.journal == nil {
		return nil
	}
	if err := r.journal.Truncate(0); err != nil {
		return err
	}
	return r.journal.Sync()
}

// typeAt lstats name in d and returns its S_IFMT bits; 0 if it is missing.
func typeAt(d *os.File, name string) (uint32, error) {
	var st unix.Stat_t
	err := unix.Fstatat(int(d.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return 0, nil
	}
	if err != nil {
		return 0, &os.PathError{Op: "lstat", Path: filepath.Join(d.Name(), name), Err: err}
	}
	return st.Mode & unix.S_IFMT, nil
}

// unlinkat removes name from d; unlinkat never follows a symlink.
func unlinkat(d *os.File, name string) error {
	err := unix.Unlinkat(int(d.Fd()), name, 0)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "unlink", Path: filepath.Join(d.Name(), name), Err: err}
	}
	return nil
}

func recFields(rec Record) []zap.Field {
	return []zap.Field{zap.Uint64("id", rec.ID), zap.String("kind", string(rec.Kind)),
		zap.String("target", rec.Target)}
}
