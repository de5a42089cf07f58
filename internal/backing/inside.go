package backing

import (
	"errors"

	"golang.org/x/sys/unix"
)

// maxDepth bounds the walk up from a directory to BACKING's top.
const maxDepth = 1 << 16

// ErrLeft: a directory was moved out of BACKING directly.
var ErrLeft = errors.New("directory is no longer inside the backing directory")

// Inside walks up the ".." chain of directory fd until BACKING's top,
// the directory (topDev, topIno) (inside), or the root of the file
// system tree (outside: ErrLeft).
func Inside(fd int, topDev, topIno uint64) error {
	cur := fd
	defer func() { closeIf(cur, fd) }()
	st, err := Fstat(cur)
	if err != nil {
		return err
	}
	for range maxDepth {
		if uint64(st.Dev) == topDev && st.Ino == topIno {
			return nil
		}
		up, err := unix.Openat(cur, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		closeIf(cur, fd)
		cur = up
		parent, err := Fstat(up)
		if err != nil {
			return err
		}
		if parent.Dev == st.Dev && parent.Ino == st.Ino {
			return ErrLeft // "/" is its own parent
		}
		st = parent
	}
	return ErrLeft
}
