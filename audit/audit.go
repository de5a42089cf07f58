// Package audit writes one JSON line per commit and per rejected commit
// to a file (an fs.Observer). Lines are queued and written by one
// goroutine, so a commit never waits for the file; when the queue is full
// a line is dropped, counted, and the trail says so. Reopen (on SIGHUP)
// starts a new file at the same path, for log rotation.
package audit

import (
	"bufio"
	"encoding/json"
	"os"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/journal"
)

// QueueLen bounds the lines waiting to be written.
const QueueLen = 4096

// Line is one line of the trail.
type Line struct {
	Time    time.Time `json:"time"`
	Event   string    `json:"event"` // "commit", "reject", or "dropped" (lines lost, see Dropped)
	Path    string    `json:"path,omitempty"`
	Kind    string    `json:"kind,omitempty"` // replace, append, inplace
	Bytes   int64     `json:"bytes"`          // the new version's size; for an append, the bytes appended
	PID     uint32    `json:"pid"`
	UID     uint32    `json:"uid"`
	Cmdline string    `json:"cmdline"`
	// LockWaitUS and DurationUS: microseconds waiting for the lock, and
	// for the whole commit.
	LockWaitUS int64 `json:"lock_wait_us"`
	DurationUS int64 `json:"duration_us"`
	// Result is "committed" or the reason it was not (fs.Reason*).
	Result string `json:"result"`
	Error  string `json:"error,omitempty"`
	// Kept is where a rejected commit's bytes are (".safefs/rejected/NAME"),
	// or "dropped" (rejected/ full); empty for a commit or a killed writer.
	Kept    string `json:"kept,omitempty"`
	Dropped int64  `json:"dropped,omitempty"` // event "dropped": lines lost before this one
}

// Writer is an audit trail being written.
type Writer struct {
	path    string
	log     *zap.Logger
	q       chan Line
	reopen  chan struct{}
	stop    chan struct{}
	done    chan struct{}
	dropped atomic.Int64
}

var _ fs.Observer = (*Writer)(nil)

// Open opens (appends to) the trail at path, mode 0600: it holds users'
// command lines.
func Open(path string, log *zap.Logger) (*Writer, error) {
	f, err := openFile(path)
	if err != nil {
		return nil, err
	}
	w := &Writer{path: path, log: log, q: make(chan Line, QueueLen), reopen: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
	go w.run(f)
	return w, nil
}

func openFile(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
}

// Reopen makes the next lines go to a new file at the path (the old one
// was renamed away by a log rotation).
func (w *Writer) Reopen() {
	select {
	case w.reopen <- struct{}{}:
	default: // one is pending already
	}
}

// Dropped is how many lines were lost because the queue was full.
func (w *Writer) Dropped() int64 { return w.dropped.Load() }

// Close writes what is queued and closes the file.
func (w *Writer) Close() {
	close(w.stop)
	<-w.done
}

// Committed queues a commit's line.
func (w *Writer) Committed(e fs.CommitEvent) { w.put(lineOf("commit", e, "committed")) }

// Rejected queues a rejection's line.
func (w *Writer) Rejected(e fs.RejectEvent) {
	l := lineOf("reject", e.CommitEvent, e.Reason)
	if e.Err != nil {
		l.Error = e.Err.Error()
	}
	switch {
	case e.KeptAs != "":
		l.Kept = fs.InternalDir + "/" + journal.RejectedDir + "/" + e.KeptAs
	case e.Reason != fs.ReasonKilled:
		l.Kept = "dropped"
	}
	w.put(l)
}

// Recovered is not part of the trail (recovery is logged).
func (w *Writer) Recovered(journal.Summary) {}

func lineOf(event string, e fs.CommitEvent, result string) Line {
	return Line{Time: e.Time.UTC(), Event: event, Path: e.Path, Kind: e.Kind, Bytes: e.Bytes, PID: e.PID, UID: e.UID,
		Cmdline: e.Cmdline(), LockWaitUS: e.LockWait.Microseconds(), DurationUS: e.Duration.Microseconds(), Result: result}
}

func (w *Writer) put(l Line) {
	select {
	case w.q <- l:
	default:
		w.dropped.Add(1)
	}
}

// run writes lines until Close; a reopen request goes before the next line.
func (w *Writer) run(f *os.File) {
	defer close(w.done)
	out := &sink{w: w, f: f, buf: bufio.NewWriter(f)}
	defer out.close()
	for {
		select {
		case <-w.reopen:
			out.reopen()
		case l := <-w.q:
			out.write(l)
			out.drain()
		case <-w.stop:
			out.drain()
			return
		}
	}
}

// sink is the open file, owned by run.
type sink struct {
	w        *Writer
	f        *os.File
	buf      *bufio.Writer
	reported int64 // dropped lines already written in the trail
	failing  bool  // a write failed; logged once until one succeeds
}

// drain writes what else is queued, then flushes.
func (s *sink) drain() {
	for {
		select {
		case <-s.w.reopen:
			s.reopen()
		case l := <-s.w.q:
			s.write(l)
		default:
			s.flush()
			return
		}
	}
}

func (s *sink) write(l Line) {
	s.sayDropped()
	s.encode(l)
}

// sayDropped writes how many lines were lost since it last said so.
func (s *sink) sayDropped() {
	if d := s.w.dropped.Load(); d > s.reported {
		s.encode(Line{Time: time.Now().UTC(), Event: "dropped", Dropped: d - s.reported})
		s.reported = d
	}
}

func (s *sink) encode(l Line) {
	b, err := json.Marshal(l)
	if err == nil {
		b = append(b, '\n')
		_, err = s.buf.Write(b)
	}
	s.report(err)
}

func (s *sink) flush() { s.report(s.buf.Flush()) }

func (s *sink) report(err error) {
	if err != nil {
		s.buf.Reset(s.f) // a bufio.Writer's error sticks: start over
	}
	switch {
	case err != nil && !s.failing:
		s.failing = true
		s.w.log.Error("audit trail: write failed; lines are lost until it works again", zap.String("file", s.w.path), zap.Error(err))
	case err == nil && s.failing:
		s.failing = false
		s.w.log.Info("audit trail: writing again", zap.String("file", s.w.path))
	}
}

func (s *sink) reopen() {
	s.flush()
	f, err := openFile(s.w.path)
	if err != nil {
		s.w.log.Error("audit trail: reopen failed, still writing to the old file", zap.String("file", s.w.path), zap.Error(err))
		return
	}
	s.f.Close()
	s.f = f
	s.buf.Reset(f)
	s.w.log.Info("audit trail reopened", zap.String("file", s.w.path))
}

func (s *sink) close() {
	s.sayDropped()
	s.flush()
	s.f.Close()
}
