package fs

import (
	"errors"
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
	"github.com/safefs/safefs/journal"
)

// The internal directory holds what the daemon trusts: the journal it
// replays, the undo copies it writes back, the staging files it
// publishes. So it must be the daemon's own, and no one else may have
// been able to write in it: checked on the very fds used afterwards, at
// every mount and `safefs recover`, before recovery reads anything.

// errUntrusted: the internal directory is not the daemon's own.
var errUntrusted = errors.New("internal directory is not safefs's own")

type untrusted struct{ what, why string }

func (u untrusted) Error() string { return u.what + ": " + u.why }
func (u untrusted) Unwrap() error { return errUntrusted }

// internalParts are the directories inside INTERNAL; internalFiles the
// files, which may be missing.
var (
	internalParts = []string{journal.StagingDir, journal.UndoDir, journal.RejectedDir}
	internalFiles = []string{"journal", "lock", learnedName, clusterName}
)

// openInternal opens the internal directory and its parts, creating them
// as needed. One that is not the daemon's own is moved aside
// (quarantined), never read, and a new one is made.
func (r *root) openInternal() error {
	for range 3 {
		err := r.openInternalOnce()
		var u untrusted
		if !errors.As(err, &u) {
			return err
		}
		r.closeInternal()
		if err := r.quarantine(u); err != nil {
			return err
		}
	}
	return fmt.Errorf("%s: %w (it keeps being replaced)", InternalDir, errUntrusted)
}

func (r *root) openInternalOnce() error {
	return r.openInternalIn(r.rootfd, InternalDir, r.internalPath)
}

// openInternalIn opens parent/nm as the internal directory (BACKING's
// .safefs, or a cluster node's own directory in it) with its parts.
func (r *root) openInternalIn(parent int, nm, path string) error {
	d, err := openOwnDir(parent, nm, unix.O_RDONLY)
	if err != nil {
		return err
	}
	r.internal = os.NewFile(uintptr(d), path)
	for i, nm := range internalParts {
		if *r.parts()[i], err = openOwnDir(d, nm, unix.O_PATH); err != nil {
			return err
		}
	}
	for _, nm := range internalFiles {
		if err := checkOwnFile(d, nm); err != nil {
			return err
		}
	}
	return nil
}

// openOwnDir makes dir/nm (0700) if missing, opens it without following
// a symlink, and checks that it is the daemon's own; group and other
// read or search bits are taken away.
func openOwnDir(dir int, nm string, flags int) (int, error) {
	if err := backing.MkdirAt(dir, nm, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, err
	}
	fd, err := backing.OpenAt(dir, nm, flags|unix.O_DIRECTORY, 0)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return -1, untrusted{nm, "not a directory"}
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

// checkOwnFile checks dir/nm, if it exists, like openOwnDir, and that
// it is a regular file with one link.
func checkOwnFile(dir int, nm string) error {
	st, err := backing.StatAt(dir, nm)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 {
		return untrusted{nm, "not a regular file with one link"}
	}
	return own(nm, &st)
}

// own: owned by the daemon's user, and no one else may write it.
func own(nm string, st *unix.Stat_t) error {
	if int(st.Uid) != os.Geteuid() {
		return untrusted{nm, fmt.Sprintf("owned by uid %d", st.Uid)}
	}
	if st.Mode&0o022 != 0 {
		return untrusted{nm, fmt.Sprintf("writable by others (mode %04o)", st.Mode&0o7777)}
	}
	return nil
}

// quarantine renames the untrusted internal directory aside, where the
// operator can look at it; safefs never reads it.
func (r *root) quarantine(u untrusted) error {
	aside := fmt.Sprintf("%s.untrusted-%s", InternalDir, time.Now().UTC().Format("20060102T150405.000000000Z"))
	err := backing.RenameAt(r.rootfd, InternalDir, r.rootfd, aside, unix.RENAME_NOREPLACE)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%s is not safefs's own (%v) and could not be moved aside: %w", InternalDir, u, err)
	}
	r.log.Error("internal directory quarantined: it was not safefs's own, so its journal is not replayed",
		zap.String("reason", u.Error()), zap.String("moved_to", aside))
	return nil
}

// InternalDir returns a descriptor of the internal directory checked at
// mount (BACKING/.safefs, or a cluster node's .safefs/nodes/NODE), for
// what the daemon keeps there besides its state: the status socket is
// made and removed through it, never through the path, which a writer
// of BACKING can point elsewhere at any moment. The caller closes it.
func (s *Server) InternalDir() (*os.File, error) {
	fd, err := unix.FcntlInt(s.r.internal.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), s.r.internalPath), nil
}

// parts are the fds of internalParts, in that order.
func (r *root) parts() []*int { return []*int{&r.stagingfd, &r.undofd, &r.rejectedfd} }

func (r *root) closeInternal() {
	for _, fd := range r.parts() {
		closeFd(*fd)
		*fd = -1
	}
	if r.internal != nil {
		r.internal.Close()
		r.internal = nil
	}
}
