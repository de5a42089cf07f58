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
	"sync"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// ErrClosed is returned by a Journal used after Close.
var ErrClosed = errors.New("journal: closed")

// ErrFinished is returned by Commit on an Entry already committed or aborted.
var ErrFinished = errors.New("journal: entry already finished")

const journalName = "journal"

// Journal appends commit records to INTERNAL/journal. Safe for concurrent use.
type Journal struct {
	f       *os.File
	durable bool
	log     *zap.Logger

	mu     sync.Mutex // guards the fields below and the order of lines
	lastID uint64
	open   int // entries whose end line is not yet durable
	closed bool
	torn   bool // a failed write may have left a partial line
}

// Entry is one commit logged by Begin.
type Entry struct {
	j    *Journal
	rec  Record
	done bool // guarded by j.mu
}

// Open opens or creates INTERNAL/journal. IDs continue after those in it.
// Recover should run first: Open does not settle cut-off records.
func Open(internalDir string, durable bool, log *zap.Logger) (*Journal, error) {
	if log == nil {
		log = zap.NewNop()
	}
	f, err := os.OpenFile(filepath.Join(internalDir, journalName),
		os.O_RDWR|os.O_CREATE|os.O_APPEND|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	j := &Journal{f: f, durable: durable, log: log}
	if err := j.load(internalDir); err != nil {
		f.Close()
		return nil, err
	}
	return j, nil
}

func (j *Journal) load(internalDir string) error {
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
	j.lastID = s.maxID
	if err := j.endTornLine(fi.Size()); err != nil {
		return err
	}
	if j.durable {
		// The name of a just-created journal must survive a crash too.
		return syncPath(internalDir)
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
	_, err := j.f.Write([]byte("\n"))
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
	err := j.writeLine(r)
	if err == nil {
		j.open++
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
func (e *Entry) Commit() error { return e.j.finish(e, false) }

// Abort logs that the commit was given up. It is a no-op after Commit or
// Abort, so callers can always defer it.
func (e *Entry) Abort() error { return e.j.finish(e, true) }

func (j *Journal) finish(e *Entry, aborted bool) error {
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
		err = j.writeLine(endRecord{End: e.rec.ID, Aborted: aborted})
	}
	j.mu.Unlock()
	if err == nil {
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

// writeLine appends one line with a single write(2). Caller holds j.mu.
func (j *Journal) writeLine(v any) error {
	b, err := encodeLine(v)
	if err != nil {
		return err
	}
	if j.torn {
		// End the partial line a failed write left, so this one reads.
		b = append([]byte{'\n'}, b...)
	}
	n, err := j.f.Write(b)
	if err == nil || n > 0 {
		j.torn = err != nil
	}
	return err
}

// sync runs without j.mu so concurrent commits share the disk's time.
func (j *Journal) sync() error {
	if !j.durable {
		return nil
	}
	return j.f.Sync()
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
	var err error
	if j.open == 0 {
		err = j.f.Truncate(0)
		if err == nil {
			err = j.sync()
		}
	}
	return errors.Join(err, j.f.Close())
}

// syncPath fsyncs a directory so the names created or removed in it last.
func syncPath(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
