package fs

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/fuseconn"
	"github.com/safefs/safefs/internal/mountwatch"
)

// An unmount from outside (umount, the stop of an fstab mount unit)
// tells the daemon nothing. Without copies of the mount elsewhere the
// kernel ends the connection itself, at once or, after a lazy unmount,
// with the last close of a file still open through it. But a copy in a
// mount namespace made after the mount (see unmount) keeps it: the
// daemon would serve that namespace unseen and keep BACKING from the
// next mount. So a watcher looks each second: once the mount is gone
// here while another namespace still has it mounted, and still so after
// heldElsewhere, it ends the connection as unmount does. (A poll of
// mountinfo for changes missed about half of the unmounts here.)

// watchEvery is how often the watcher looks.
const watchEvery = time.Second

// watchMount starts the watcher (Mount); release stops it.
func (s *Server) watchMount() {
	s.watch = mountwatch.Start(watchEvery, heldElsewhere, s.heldOnlyElsewhere, s.endConnection)
}

// stopWatch stops the watcher and waits for it (release).
func (s *Server) stopWatch() {
	if w := s.watch; w != nil {
		w.Stop()
	}
}

// heldOnlyElsewhere reports whether the mount is gone from this mount
// namespace while another one has it mounted.
func (s *Server) heldOnlyElsewhere() bool {
	return !s.mountIDHere() && !s.mountedHere() && fuseconn.MountedElsewhere(s.r.conn)
}

// mountIDHere reports whether the mount point leads to this mount, by
// one statx that asks the daemon nothing (cached attributes); false
// also when something is mounted over it (mountedHere looks further).
func (s *Server) mountIDHere() bool {
	var st unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, s.r.mountpoint, unix.AT_STATX_DONT_SYNC|unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &st)
	return err == nil && st.Mask&unix.STATX_MNT_ID != 0 && int64(st.Mnt_id) == s.r.mntID.Load()
}
