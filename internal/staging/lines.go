package staging

import (
	"bytes"
	"os"
)

// lineScan is the most read at once looking back for a line's end.
const lineScan = 64 << 10

// LastNewline returns the offset of the last newline in f between from
// and to, -1 if none, reading back from to: a small read first, since
// a line mostly ends at the very end.
func LastNewline(f *os.File, from, to int64) (int64, error) {
	chunk := int64(4 << 10)
	for end := to; end > from; chunk = min(2*chunk, lineScan) {
		start := max(from, end-chunk)
		b := make([]byte, end-start)
		if _, err := f.ReadAt(b, start); err != nil {
			return -1, err
		}
		if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
			return start + int64(i), nil
		}
		end = start
	}
	return -1, nil
}
