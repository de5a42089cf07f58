package journal

import (
	"bufio"
	"errors"
	"io"

	"go.uber.org/zap"
)

// maxLine bounds a journal line; longer lines are skipped, never loaded.
const maxLine = 1 << 20

// scanned is what a journal says, from its verified lines only.
type scanned struct {
	recs    []Record        // valid commit records, in file order
	ended   map[uint64]bool // IDs with an end or abort line
	maxID   uint64          // highest ID on any intact line
	refused int
}

// scan reads a journal line by line, skipping whatever does not verify.
func scan(r io.Reader, log *zap.Logger) (scanned, error) {
	br := bufio.NewReaderSize(r, maxLine)
	s := scanned{ended: map[uint64]bool{}}
	seen := map[uint64]bool{}
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
				s.refuse(log, n, "torn last line", nil)
			}
			return s, nil
		case err != nil:
			return s, err
		default:
			s.add(log, n, b[:len(b)-1], seen)
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

func (s *scanned) add(log *zap.Logger, n int, b []byte, seen map[uint64]bool) {
	l, err := decodeLine(b)
	if err != nil {
		s.refuse(log, n, "unreadable line", err)
		return
	}
	if l.End != nil {
		if l.Record != (Record{}) {
			s.refuse(log, n, "end line with record fields", nil)
			return
		}
		s.ended[*l.End] = true
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
	if r.ID == 0 || seen[r.ID] {
		s.refuse(log, n, "missing or duplicate id", nil)
		return
	}
	seen[r.ID] = true
	s.recs = append(s.recs, r)
}

func (s *scanned) refuse(log *zap.Logger, n int, why string, err error) {
	s.refused++
	log.Warn("journal: skipped line", zap.Int("line", n), zap.String("why", why), zap.Error(err))
}
