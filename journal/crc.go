package journal

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

const chunk = 64 << 10

// CRC returns the crc32c of the n bytes of f at off. Holes are not read:
// their zeros are folded into the sum arithmetically, so a sparse file
// costs what its data costs (a 16 TiB hole takes microseconds). It reads
// with pread and moves f's offset (SEEK_DATA). A file shorter than off+n
// is an error wrapping io.ErrUnexpectedEOF.
func CRC(f *os.File, off, n int64) (uint32, error) {
	if off < 0 || n < 0 || off > maxInt64-n {
		return 0, errors.New("journal: bad CRC range")
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0, err
	}
	if st.Size < off+n {
		return 0, fmt.Errorf("journal: crc of %s: %w", f.Name(), io.ErrUnexpectedEOF)
	}
	var sum uint32
	for end := off + n; off < end; {
		data, hole := dataRun(f, off, end)
		sum = crcZeros(sum, data-off)
		var err error
		if sum, err = crcRead(f, sum, data, hole-data); err != nil {
			return 0, err
		}
		off = hole
	}
	return sum, nil
}

// dataRun returns the next run of data at or after off, cut at end: a
// file system without SEEK_DATA is all data.
func dataRun(f *os.File, off, end int64) (data, hole int64) {
	fd := int(f.Fd())
	data, err := unix.Seek(fd, off, unix.SEEK_DATA)
	if errors.Is(err, unix.ENXIO) {
		return end, end // only a hole is left
	}
	if err != nil {
		return off, end
	}
	if data >= end {
		return end, end
	}
	hole, err = unix.Seek(fd, data, unix.SEEK_HOLE)
	if err != nil || hole > end {
		hole = end
	}
	return data, hole
}

func crcRead(f *os.File, sum uint32, off, n int64) (uint32, error) {
	buf := make([]byte, min(n, chunk))
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

// crcZeros returns crc32.Update(sum, castagnoli, n zero bytes) in
// O(log n): a zero byte moves the CRC register by a linear map, so n of
// them apply that map's n-th power, built from powers of two by squaring
// (as zlib's crc32_combine does).
func crcZeros(sum uint32, n int64) uint32 {
	reg := ^sum // crc32.Update works on the complemented register
	for k := 0; n > 0; k, n = k+1, n>>1 {
		if n&1 != 0 {
			reg = zeroPowers()[k].times(reg)
		}
	}
	return ^reg
}

// gf2 is a 32x32 matrix over GF(2): column i is the image of bit i.
type gf2 [32]uint32

func (m *gf2) times(v uint32) uint32 {
	var s uint32
	for i := 0; v != 0; i, v = i+1, v>>1 {
		if v&1 != 0 {
			s ^= m[i]
		}
	}
	return s
}

func (m *gf2) square() gf2 {
	var sq gf2
	for i := range m {
		sq[i] = m.times(m[i])
	}
	return sq
}

// zeroPowers[k] moves the register over 2^k zero bytes.
var zeroPowers = sync.OnceValue(func() []gf2 {
	var bit gf2 // one zero bit: shift right, xor the polynomial if bit 0 was set
	bit[0] = crc32.Castagnoli
	for i := 1; i < 32; i++ {
		bit[i] = 1 << (i - 1)
	}
	p := bit.square() // 2 bits
	p = p.square()    // 4 bits
	p = p.square()    // 8 bits: one byte
	out := make([]gf2, 63)
	for k := range out {
		out[k] = p
		p = p.square()
	}
	return out
})

// Checksum is CRC of bytes held in memory.
func Checksum(b []byte) uint32 { return crc32c(b) }
