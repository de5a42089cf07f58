package staging

import (
	"os"

	"golang.org/x/sys/unix"
)

// StartWriteback starts writing back n bytes of f at off and does not
// wait for them. f cannot be closed meanwhile (Control holds it).
func StartWriteback(f *os.File, off, n int64) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_ = unix.SyncFileRange(int(fd), off, n, unix.SYNC_FILE_RANGE_WRITE)
	})
}
