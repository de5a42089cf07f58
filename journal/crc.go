package journal

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

const chunk = 64 << 10

// CRC returns the crc32c of the n bytes of f at off. It reads with pread, so
// it neither moves nor depends on f's offset. A file shorter than off+n is an
// error wrapping io.ErrUnexpectedEOF.
func CRC(f *os.File, off, n int64) (uint32, error) {
	if off < 0 || n < 0 {
		return 0, errors.New("journal: negative CRC range")
	}
	buf := make([]byte, min(n, chunk))
	var sum uint32
	for n > 0 {
		k := min(n, int64(len(buf)))
		m, err := f.ReadAt(buf[:k], off)
		sum = crc32.Update(sum, castagnoli, buf[:m])
		off, n = off+int64(m), n-int64(m)
		if n > 0 && errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("journal: crc of %s: %w", f.Name(), io.ErrUnexpectedEOF)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
	}
	return sum, nil
}
