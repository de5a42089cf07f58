package journal

import (
	"bufio"
	"errors"
	"io"
	"reflect"
	"slices"

	"go.uber.org/zap"
)

// maxLine bounds a journal line; longer lines are skipped, never loaded.
const maxLine = 1 << 20

// scanned is what a journal says, from its verified lines only. It holds
// the records still open, never the history: a journal may be long.
type scanned struct {
	open     map[uint64]Record   // valid records without an end line yet
	byTarget map[string][]uint64 // the open records of each target
	maxID    uint64              // highest ID on any intact line
	lastRec  uint64              // highest record ID: IDs only grow
	records  int                 // valid records seen
	refused  int
	torn     int // a last line cut short
}

// cut returns the open records in journal (ID) order.
func (s *scanned) cut() []Record {
	ids := make([]uint64, 0, len(s.open))
	for id := range s.open {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]Record, len(ids))
	for i, id := range ids {
		out[i] = s.open[id]
	}
	return out
}

// scan reads a journal line by line, skipping whatever does not verify.
func scan(r io.Reader, log *zap.Logger) (scanned, error) {
	br := bufio.NewReaderSize(r, maxLine)
	s := scanned{open: map[uint64]Record{}, byTarget: map[string][]uint64{}}
	for n := 1; ; n++ {
		b, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			s.refuse(log, n, "line longer than 1 MiB", nil)
			if err := skipLine(br); err != nil && err != io.EOF {
				return s, err
			}
		case err == io.EOF:
			if len(b) > 0 {
				s.torn++
				log.Info("journal: last line cut short by a crash: ignored", zap.Int("line", n))
			}
			return s, nil
		case err != nil:
			return s, err
		default:
			s.add(log, n, b[:len(b)-1])
		}
	}
}

func skipLine(br *bufio.Reader) error {
	for {
		_, err := br.ReadSlice('\n')
		if !errors.Is(err, bufio.ErrBufferFull) {
			return err
		}
	}
}

func (s *scanned) add(log *zap.Logger, n int, b []byte) {
	l, err := decodeLine(b)
	if err != nil {
		s.refuse(log, n, "unreadable line", err)
		return
	}
	if l.End != nil {
		if !reflect.ValueOf(l.Record).IsZero() {
			s.refuse(log, n, "end line with record fields", nil)
			return
		}
		s.end(*l.End)
		s.maxID = max(s.maxID, *l.End)
		return
	}
	r := l.Record
	s.maxID = max(s.maxID, r.ID)
	if err := r.Validate(); err != nil {
		s.refused++
		log.Warn("journal: refused", zap.Int("line", n), zap.Uint64("id", r.ID),
			zap.String("target", r.Target), zap.Error(err))
		return
	}
	if r.ID <= s.lastRec {
		s.refuse(log, n, "missing, duplicate or out of order id", nil)
		return
	}
	s.lastRec = r.ID
	s.records++
	s.supersede(log, r.Target)
	s.open[r.ID] = r
	s.byTarget[r.Target] = append(s.byTarget[r.Target], r.ID)
}

// supersede drops the open append and inplace records of target when a
// later record for it comes: commits to one path are serialized, so the
// later one began after the earlier was settled. Not a redo record: its
// bytes need not be durable in the target yet (they are redone in order).
func (s *scanned) supersede(log *zap.Logger, target string) {
	var keep []uint64
	for _, id := range s.byTarget[target] {
		if rec := s.open[id]; rec.Kind == Replace || rec.Redo() {
			keep = append(keep, id)
		} else {
			delete(s.open, id)
			log.Info("recovery: superseded by a later commit", recFields(rec)...)
		}
	}
	s.setTarget(target, keep)
}

// end forgets the record id: it was finished.
func (s *scanned) end(id uint64) {
	rec, ok := s.open[id]
	if !ok {
		return
	}
	delete(s.open, id)
	s.setTarget(rec.Target, slices.DeleteFunc(s.byTarget[rec.Target], func(x uint64) bool { return x == id }))
}

func (s *scanned) setTarget(target string, ids []uint64) {
	if len(ids) == 0 {
		delete(s.byTarget, target)
	} else {
		s.byTarget[target] = ids
	}
}

func (s *scanned) refuse(log *zap.Logger, n int, why string, err error) {
	s.refused++
	log.Warn("journal: skipped line", zap.Int("line", n), zap.String("why", why), zap.Error(err))
}
