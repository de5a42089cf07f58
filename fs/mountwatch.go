package fs

import (
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/mountinfo"
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

// mountWatch is the watcher of one mount.
type mountWatch struct {
	stop chan struct{} // closed by release
	done chan struct{} // closed when the watcher returns
}

// watchMount starts the watcher (Mount); release stops it.
func (s *Server) watchMount() {
	s.watch = &mountWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go s.watchLoop()
}

func (s *Server) watchLoop() {
	w := s.watch
	defer close(w.done)
	tick := time.NewTicker(watchEvery)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-w.stop:
			return
		}
		if !s.heldOnlyElsewhere() {
			continue
		}
		select {
		case <-time.After(heldElsewhere):
		case <-w.stop:
			return
		}
		if s.heldOnlyElsewhere() {
			s.endConnection()
		}
	}
}

// stopWatch stops the watcher and waits for it (release).
func (s *Server) stopWatch() {
	if w := s.watch; w != nil {
		close(w.stop)
		<-w.done
	}
}

// heldOnlyElsewhere reports whether the mount is gone from this mount
// namespace while another one has it mounted.
func (s *Server) heldOnlyElsewhere() bool {
	return !s.mountIDHere() && !s.mountedHere() && mountedElsewhere(s.r.conn)
}

// mountIDHere reports whether the mount point leads to this mount, by
// one statx that asks the daemon nothing (cached attributes); false
// also when something is mounted over it (mountedHere looks further).
func (s *Server) mountIDHere() bool {
	var st unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, s.r.mountpoint, unix.AT_STATX_DONT_SYNC|unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &st)
	return err == nil && st.Mask&unix.STATX_MNT_ID != 0 && int64(st.Mnt_id) == s.r.mntID.Load()
}

// mountedElsewhere reports whether a mount namespace other than this
// process's has FUSE connection conn's file system mounted (mountinfo's
// device 0:conn).
func mountedElsewhere(conn uint32) bool {
	if conn == 0 {
		return false
	}
	return mountinfo.Elsewhere("0:" + strconv.FormatUint(uint64(conn), 10))
}
