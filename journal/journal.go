// Package journal is safefs's write-ahead journal of commits and the crash
// recovery that reads it. A commit is logged (Begin) before it touches its
// target and marked finished (Commit or Abort) after; recovery settles the
// commits left unfinished by a crash, deciding from verified data only.
package journal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// ErrClosed is returned by a Journal used after Close.
var ErrClosed = errors.New("journal: closed")

// ErrFinished is returned by Commit on an Entry already committed or aborted.
var ErrFinished = errors.New("journal: entry already finished")

const (
	journalName = "journal"
	compactName = "journal.new" // the next journal while it is written
)

// CompactAt is the size past which the journal is rewritten with only the
// records still open: while mounted it would otherwise only grow.
var CompactAt int64 = 4 << 20

// Journal appends commit records to INTERNAL/journal. Safe for concurrent use.
type Journal struct {
	dir     *os.File // INTERNAL
	durable bool
	log     *zap.Logger

	mu     sync.Mutex // guards the fields below and the order of lines
	f      *os.File
	size   int64
	lastID uint64
	live   map[uint64][]byte // lines of the entries not finished yet
	open   int               // entries whose end line is not yet durable
	closed bool
	torn   bool // a failed write may have left a partial line
	// syncing is held (read) by an fsync of f in progress: compaction
	// closes the old f only once none is.
	syncing sync.RWMutex
	group   GroupSync
	// lazyEnds counts end lines written without an fsync (CommitLazy),
	// syncedEnds how many of them a finished fsync covered.
	lazyEnds, syncedEnds uint64
}

// Entry is one commit logged by Begin.
type Entry struct {
	j    *Journal
	rec  Record
	done bool // guarded by j.mu
}

// Open opens or creates the journal in dir, the internal directory the
// caller opened and checked. IDs continue after those in it. Recover
// should run first: Open does not settle cut-off records.
func Open(dir *os.File, durable bool, log *zap.Logger) (*Journal, error) {
	if log == nil {
		log = zap.NewNop()
	}
	f, err := openIn(dir, journalName, unix.O_RDWR|unix.O_CREAT|unix.O_APPEND)
	if err != nil {
		return nil, err
	}
	j := &Journal{dir: dir, f: f, durable: durable, log: log, live: map[uint64][]byte{}}
	if err := j.load(); err != nil {
		f.Close()
		return nil, err
	}
	return j, nil
}

// openIn opens name in dir, never through a symlink, 0600.
func openIn(dir *os.File, name string, flags int) (*os.File, error) {
	fd, err := unix.Openat(int(dir.Fd()), name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: filepath.Join(dir.Name(), name), Err: err}
	}
	return os.NewFile(uintptr(fd), filepath.Join(dir.Name(), name)), nil
}

func (j *Journal) load() error {
	fi, err := j.f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("journal: %s is not a regular file", j.f.Name())
	}
	s, err := scan(io.NewSectionReader(j.f, 0, fi.Size()), j.log)
	if err != nil {
		return err
	}
	j.lastID, j.size = s.maxID, fi.Size()
	if err := j.endTornLine(fi.Size()); err != nil {
		return err
	}
	if j.durable {
		// The name of a just-created journal must survive a crash too.
		return j.dir.Sync()
	}
	return nil
}

// endTornLine ends a torn last line, else the next record would be glued
// onto it and both would be unreadable.
func (j *Journal) endTornLine(size int64) error {
	if size == 0 {
		return nil
	}
	last := make([]byte, 1)
	if _, err := j.f.ReadAt(last, size-1); err != nil {
		return err
	}
	if last[0] == '\n' {
		return nil
	}
	n, err := j.f.Write([]byte("\n"))
	j.size += int64(n)
	return err
}

// Begin validates r, gives it the next ID and logs it; when Begin returns,
// the commit may touch its target.
func (j *Journal) Begin(r Record) (*Entry, error) {
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil, ErrClosed
	}
	j.lastID++
	r.ID = j.lastID
	b, err := encodeLine(r)
	if err == nil {
		err = j.writeLine(b)
	}
	if err == nil {
		j.open++
		j.live[r.ID] = b
	}
	j.mu.Unlock()
	if err == nil {
		// On failure the entry stays counted open, so Close keeps the
		// journal and recovery decides from the data.
		err = j.sync()
	}
	if err != nil {
		return nil, err
	}
	return &Entry{j: j, rec: r}, nil
}

// Record returns the logged record, with its ID.
func (e *Entry) Record() Record { return e.rec }

// Commit logs that the commit is complete. Once it returns nil (and the
// journal is durable), recovery will not undo the commit.
func (e *Entry) Commit() error { return e.finish(false, true) }

// CommitLazy logs that the commit is complete without waiting for the
// line to be durable: for a record that recovery settles the same way
// ended or not (an append whose bytes are durable verifies by its CRC).
// The next fsync of the journal, or SyncEnds, makes it durable.
func (e *Entry) CommitLazy() error { return e.finish(false, false) }

// Abort logs that the commit was given up. It is a no-op after Commit or
// Abort, so callers can always defer it.
func (e *Entry) Abort() error { return e.finish(true, true) }

// finish ends e; a nil Entry (a commit that logged no record) is a no-op.
func (e *Entry) finish(aborted, durable bool) error {
	if e == nil {
		return nil
	}
	return e.j.finish(e, aborted, durable)
}

// SyncEnds makes the end lines of CommitLazy durable, if some are not: a
// commit that writes no record of its own calls it before it changes a
// target that such a record names, so that recovery does not find that
// record open and its file another.
func (j *Journal) SyncEnds() error {
	j.mu.Lock()
	done := j.syncedEnds >= j.lazyEnds
	j.mu.Unlock()
	if done {
		return nil
	}
	return j.sync()
}

// EndsPending reports whether an end line of CommitLazy is not durable yet.
func (j *Journal) EndsPending() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.durable && j.syncedEnds < j.lazyEnds
}

func (j *Journal) finish(e *Entry, aborted, durable bool) error {
	j.mu.Lock()
	if e.done {
		j.mu.Unlock()
		if aborted {
			return nil
		}
		return ErrFinished
	}
	// Done even if the write fails: a deferred Abort must not mark a
	// possibly committed entry finished; the cut-off record lets
	// recovery decide from the data instead.
	e.done = true
	err := ErrClosed
	if !j.closed {
		err = j.writeEnd(e.rec.ID, aborted)
	}
	if err == nil && !durable {
		j.lazyEnds++
	}
	j.mu.Unlock()
	if err == nil && durable {
		err = j.sync()
	}
	if err != nil {
		return err
	}
	j.mu.Lock()
	j.open--
	j.mu.Unlock()
	return nil
}

// writeEnd logs the end of entry id, then compacts the journal if it has
// grown past CompactAt. Caller holds j.mu.
func (j *Journal) writeEnd(id uint64, aborted bool) error {
	b, err := encodeLine(endRecord{End: id, Aborted: aborted})
	if err == nil {
		err = j.writeLine(b)
	}
	if err != nil {
		return err
	}
	delete(j.live, id)
	if j.size > CompactAt {
		if err := j.compact(); err != nil {
			// The old journal stays in use and is still right.
			j.log.Warn("journal: compaction failed", zap.Error(err))
		}
	}
	return nil
}

// writeLine appends one line with a single write(2). Caller holds j.mu.
func (j *Journal) writeLine(b []byte) error {
	if j.torn {
		// End the partial line a failed write left, so this one reads.
		b = append([]byte{'\n'}, b...)
	}
	n, err := j.f.Write(b)
	j.size += int64(n)
	if err == nil || n > 0 {
		j.torn = err != nil
	}
	return err
}

// compact replaces the journal with one holding only the lines of the
// entries not finished yet: written and made durable under another name,
// then renamed over the journal. A crash at any point leaves one whole
// journal that says at least what the old one said about open entries.
// Caller holds j.mu.
func (j *Journal) compact() error {
	ids := make([]uint64, 0, len(j.live))
	for id := range j.live {
		ids = append(ids, id)
	}
	slices.Sort(ids) // recovery wants records in ID order
	var buf []byte
	for _, id := range ids {
		buf = append(buf, j.live[id]...)
	}
	nf, err := openIn(j.dir, compactName, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC|unix.O_APPEND)
	if err != nil {
		return err
	}
	if err := j.replaceWith(nf, buf); err != nil {
		nf.Close()
		_ = unix.Unlinkat(int(j.dir.Fd()), compactName, 0)
		return err
	}
	j.syncing.Lock() // no fsync of the old file in progress
	old := j.f
	j.f, j.size, j.torn = nf, int64(len(buf)), false
	j.syncing.Unlock()
	return old.Close()
}

func (j *Journal) replaceWith(nf *os.File, buf []byte) error {
	if _, err := nf.Write(buf); err != nil {
		return err
	}
	if j.durable {
		if err := nf.Sync(); err != nil {
			return err
		}
	}
	d := int(j.dir.Fd())
	if err := unix.Renameat(d, compactName, d, journalName); err != nil {
		return err
	}
	if j.durable {
		return j.dir.Sync()
	}
	return nil
}

// sync runs without j.mu so concurrent commits share the disk's time,
// and one fsync serves every line written before it started. A
// compaction meanwhile made every open entry durable in the new file.
func (j *Journal) sync() error {
	if !j.durable {
		return nil
	}
	return j.group.Do(j.syncFile)
}

func (j *Journal) syncFile() error {
	j.mu.Lock()
	f, ends := j.f, j.lazyEnds
	j.syncing.RLock()
	j.mu.Unlock()
	// fdatasync: the size a new line needs is synced with it; the
	// journal's times are of no use to recovery.
	err := unix.Fdatasync(int(f.Fd()))
	// Released before j.mu is taken again: compaction holds j.mu while
	// it waits for syncs in progress to end.
	j.syncing.RUnlock()
	if err != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
	}
	j.mu.Lock()
	j.syncedEnds = max(j.syncedEnds, ends)
	j.mu.Unlock()
	return nil
}

// Close closes the journal. With no entry open it is a clean shutdown:
// nothing is left to recover, so the journal is emptied first.
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return nil
	}
	j.closed = true
	j.syncing.Lock() // no fsync in progress
	defer j.syncing.Unlock()
	var err error
	if j.open == 0 {
		err = j.f.Truncate(0)
		if err == nil && j.durable {
			err = j.f.Sync()
		}
	}
	return errors.Join(err, j.f.Close())
}
