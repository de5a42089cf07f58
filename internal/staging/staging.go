// Package staging makes the private files a commit works on: a
// writer's pending version (a staging file, named at random in the
// staging directory, or made ahead by a Pool), an in-place commit's
// undo copy, and the copies between them, which keep a sparse file
// sparse.
package staging

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
)

// TempName is fixed-length and random, so it never collides and never
// depends on the (up to 255 byte) name of the file it stands for.
func TempName() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// NewTemp creates a private 0600 file in dir (staging or undo).
func NewTemp(dir int) (*os.File, string, error) {
	nm := TempName()
	fd, err := backing.OpenAt(dir, nm, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o600)
	if err != nil {
		return nil, "", err
	}
	return os.NewFile(uintptr(fd), nm), nm, nil
}

// CopyData makes dst a copy of src: a reflink where the file system has
// them, else copy_file_range over src's data runs only, so a sparse file
// stays sparse and a 1 TiB hole costs nothing.
func CopyData(dst, src *os.File) error {
	if err := unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())); err == nil {
		return nil
	}
	st, err := backing.Fstat(int(src.Fd()))
	if err != nil {
		return err
	}
	if err := unix.Ftruncate(int(dst.Fd()), 0); err != nil {
		return err
	}
	for off := int64(0); off < st.Size; {
		data, err := unix.Seek(int(src.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break
		}
		if err != nil {
			return err
		}
		hole, err := unix.Seek(int(src.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		if err := CopyRange(dst, data, src, data, hole-data); err != nil {
			return err
		}
		off = hole
	}
	return unix.Ftruncate(int(dst.Fd()), st.Size)
}

// AppendTo copies all of src to the end of dst.
func AppendTo(dst, src *os.File) error {
	ds, err := backing.Fstat(int(dst.Fd()))
	if err != nil {
		return err
	}
	ss, err := backing.Fstat(int(src.Fd()))
	if err != nil {
		return err
	}
	return CopyRange(dst, ds.Size, src, 0, ss.Size)
}

// CopyRange copies n bytes of src at soff to dst at doff.
func CopyRange(dst *os.File, doff int64, src *os.File, soff, n int64) error {
	for n > 0 {
		c, err := unix.CopyFileRange(int(src.Fd()), &soff, int(dst.Fd()), &doff, int(min(n, 1<<30)), 0)
		if err != nil {
			if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
				return copyPlain(dst, doff, src, soff, n)
			}
			return err
		}
		if c == 0 {
			return io.ErrUnexpectedEOF
		}
		n -= int64(c)
	}
	return nil
}

func copyPlain(dst *os.File, doff int64, src *os.File, soff, n int64) error {
	r := io.NewSectionReader(src, soff, n)
	w := io.NewOffsetWriter(dst, doff)
	c, err := io.Copy(w, r)
	if err == nil && c < n {
		return io.ErrUnexpectedEOF
	}
	return err
}
