package fs

import (
	"context"
	"errors"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/safefs/safefs/internal/fuseconn"
)

// heldElsewhere is how long the serve loop may go on after this mount
// namespace's unmount before the daemon ends its connection itself.
const heldElsewhere = 2 * time.Second

// noteConnection records the FUSE connection of the mount: the minor of
// its device (fusectl's directory name).
func (r *root) noteConnection() {
	if conn, ok := fuseconn.Of(r.mountpoint); ok {
		r.conn = conn
	}
}

// unmount unmounts and waits for the serve loop to end (go-fuse's
// Unmount does both). A copy of the mount in another mount namespace,
// made after the mount (a service started with PrivateTmp= or
// ProtectSystem=), is not unmounted with it and keeps the connection,
// and so this daemon, serving it unseen: its stop would wait until it
// is killed, and it would keep BACKING from the next mount. Once the
// mount is gone here (by this unmount, or already from outside) and the
// loop still runs after heldElsewhere, the daemon ends the connection
// (fusectl's abort). Pending versions of writers there are not
// committed (releaseHandle): their close() fails, as if the daemon died.
func (s *Server) unmount() error {
	err := s.awaitOrEnd(s.srv.Unmount)
	if err == nil || s.mountedHere() {
		return err
	}
	// Unmounted from outside: go-fuse's Unmount failed without waiting
	// for the serve loop, which may still serve another namespace.
	return s.awaitOrEnd(func() error {
		s.srv.Wait()
		return nil
	})
}

// awaitOrEnd runs fn, which waits for the serve loop; still running
// after heldElsewhere with the mount gone here, it is let end by ending
// the connection.
func (s *Server) awaitOrEnd(fn func() error) error {
	errc := make(chan error, 1)
	go func() { errc <- fn() }()
	select {
	case err := <-errc:
		return err
	case <-time.After(heldElsewhere):
	}
	if !s.mountedHere() {
		s.endConnection()
	}
	return <-errc
}

// mountedHere reports whether the mount is still in this daemon's mount
// namespace.
func (s *Server) mountedHere() bool {
	id, _, _ := SafefsMount(s.r.mountpoint)
	return id != 0 && int64(id) == s.r.mntID.Load()
}

// endConnection ends the connection of a mount that other mount
// namespaces still hold. A connection already gone (the loop is still
// ending a request) is left alone.
func (s *Server) endConnection() {
	r := s.r
	dir, err := fuseconn.Dir(r.conn)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err == nil {
		if !r.abandoned.CompareAndSwap(false, true) {
			return // the watcher and unmount both came here
		}
		r.log.Warn("unmounted here, but another mount namespace still holds the mount (a service started after it with PrivateTmp= or ProtectSystem=): ending the connection; processes there get ENOTCONN",
			zap.String("mountpoint", r.mountpoint), zap.Uint32("connection", r.conn))
		err = fuseconn.Abort(dir)
	}
	if err != nil {
		r.log.Error("could not end the connection: serving the other mount namespaces until they let the mount go", zap.Error(err))
	}
}

// releaseHandle finishes h at unmount: its commit if it has one pending,
// unless the connection was ended under it (abandoned).
func (r *root) releaseHandle(h *handle) {
	if r.abandoned.Load() {
		h.mu.Lock()
		if h.p.dirty() && !h.p.killed {
			r.log.Warn("not committed: its writer's mount namespace was cut off", zap.String("path", logPath(h.n.path())), zap.Uint32("pid", h.tgid))
		}
		h.p.killed = true // as for a writer killed by a signal: no commit
		h.mu.Unlock()
	}
	h.Release(context.Background())
}
