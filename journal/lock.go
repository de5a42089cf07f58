package journal

import (
	"errors"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// lockName is the file in INTERNAL that the serving safefs holds a flock on.
const lockName = "lock"

// ErrLocked means another safefs (or another open of the lock) holds INTERNAL.
var ErrLocked = errors.New("journal: backing directory is locked by another safefs")

// Lock takes an exclusive flock on INTERNAL/lock. flock belongs to the open
// file description, so it also excludes a second Lock in the same process,
// and the kernel drops it when the process dies: no stale locks. The lock
// file is never removed, since removing it would let two holders coexist.
func Lock(dir *os.File) (unlock func(), err error) {
	f, err := openIn(dir, lockName, unix.O_RDWR|unix.O_CREAT)
	if err != nil {
		return nil, err
	}
	err = flock(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return sync.OnceFunc(func() { f.Close() }), nil
}

func flock(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EWOULDBLOCK):
			return ErrLocked
		case !errors.Is(err, unix.EINTR):
			return &os.PathError{Op: "flock", Path: f.Name(), Err: err}
		}
	}
}
