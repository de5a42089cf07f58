package fs

import (
	"errors"

	"github.com/safefs/safefs/journal"
)

// ErrBusy means another safefs already serves this backing directory.
var ErrBusy = errors.New("backing directory is already served by another safefs")

// Server is a mounted safefs.
type Server struct{}

// Mount takes the backing directory's lock, recovers any cut-off commit,
// and mounts safefs on mountpoint. It returns once the mount is visible
// in /proc/mounts (type fuse.safefs).
func Mount(backing, mountpoint string, o Options) (*Server, error) {
	return nil, errors.New("not built yet")
}

// Wait blocks until the file system is unmounted.
func (s *Server) Wait() {}

// Unmount unmounts, waits for the serve loop to end and releases the lock.
func (s *Server) Unmount() error { return errors.New("not built yet") }

// Recover finishes or undoes commits cut off in backing, without mounting.
// It takes the same lock as Mount (ErrBusy if held).
func Recover(backing string, o Options) (journal.Summary, error) {
	return journal.Summary{}, errors.New("not built yet")
}
