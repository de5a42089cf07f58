package fs

import (
	"errors"
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
	"github.com/safefs/safefs/internal/owndir"
	"github.com/safefs/safefs/internal/rmwstate"
	"github.com/safefs/safefs/journal"
)

// The internal directory holds what the daemon trusts: the journal it
// replays, the undo copies it writes back, the staging files it
// publishes. So it must be the daemon's own, and no one else may have
// been able to write in it: checked on the very fds used afterwards, at
// every mount and `safefs recover`, before recovery reads anything.

// internalParts are the directories inside INTERNAL; internalFiles the
// files, which may be missing.
var (
	internalParts = []string{journal.StagingDir, journal.UndoDir, journal.RejectedDir}
	internalFiles = []string{"journal", "lock", rmwstate.LearnedName, clusterName}
)

// openInternal opens the internal directory and its parts, creating them
// as needed. One that is not the daemon's own is moved aside
// (quarantined), never read, and a new one is made.
func (r *root) openInternal() error {
	for range 3 {
		err := r.openInternalOnce()
		var u owndir.Untrusted
		if !errors.As(err, &u) {
			return err
		}
		r.closeInternal()
		if err := r.quarantine(u); err != nil {
			return err
		}
	}
	return fmt.Errorf("%s: %w (it keeps being replaced)", InternalDir, owndir.ErrUntrusted)
}

func (r *root) openInternalOnce() error {
	return r.openInternalIn(r.rootfd, InternalDir, r.internalPath)
}

// openInternalIn opens parent/nm as the internal directory (BACKING's
// .safefs, or a cluster node's own directory in it) with its parts.
func (r *root) openInternalIn(parent int, nm, path string) error {
	d, err := owndir.Open(parent, nm, unix.O_RDONLY)
	if err != nil {
		return err
	}
	r.internal = os.NewFile(uintptr(d), path)
	for i, nm := range internalParts {
		if *r.parts()[i], err = owndir.Open(d, nm, unix.O_PATH); err != nil {
			return err
		}
	}
	for _, nm := range internalFiles {
		if err := owndir.CheckFile(d, nm); err != nil {
			return err
		}
	}
	return nil
}

// quarantine renames the untrusted internal directory aside, where the
// operator can look at it; safefs never reads it.
func (r *root) quarantine(u owndir.Untrusted) error {
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
