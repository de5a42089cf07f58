// Package owndir opens the daemon's own directories and checks its own
// files: the internal directory holds what the daemon trusts (the
// journal it replays, the undo copies it writes back, the staging files
// it publishes), so it must be the daemon's own and no one else may have
// been able to write in it. The checks are made on the very fds used
// afterwards.
package owndir

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
)

// ErrUntrusted: the internal directory is not the daemon's own.
var ErrUntrusted = errors.New("internal directory is not safefs's own")

// Untrusted says what is not the daemon's own, and why.
type Untrusted struct{ What, Why string }

func (u Untrusted) Error() string { return u.What + ": " + u.Why }
func (u Untrusted) Unwrap() error { return ErrUntrusted }

// Open makes dir/nm (0700) if missing, opens it without following
// a symlink, and checks that it is the daemon's own; group and other
// read or search bits are taken away.
func Open(dir int, nm string, flags int) (int, error) {
	if err := backing.MkdirAt(dir, nm, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, err
	}
	fd, err := backing.OpenAt(dir, nm, flags|unix.O_DIRECTORY, 0)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return -1, Untrusted{nm, "not a directory"}
	}
	if err != nil {
		return -1, err
	}
	st, err := backing.Fstat(fd)
	if err == nil {
		err = own(nm, &st)
	}
	if err == nil && st.Mode&0o077 != 0 {
		err = unix.Chmod(backing.ProcPath(fd), 0o700)
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// CheckFile checks dir/nm, if it exists, like Open, and that
// it is a regular file with one link.
func CheckFile(dir int, nm string) error {
	st, err := backing.StatAt(dir, nm)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 {
		return Untrusted{nm, "not a regular file with one link"}
	}
	return own(nm, &st)
}

// own: owned by the daemon's user, and no one else may write it.
func own(nm string, st *unix.Stat_t) error {
	if int(st.Uid) != os.Geteuid() {
		return Untrusted{nm, fmt.Sprintf("owned by uid %d", st.Uid)}
	}
	if st.Mode&0o022 != 0 {
		return Untrusted{nm, fmt.Sprintf("writable by others (mode %04o)", st.Mode&0o7777)}
	}
	return nil
}
