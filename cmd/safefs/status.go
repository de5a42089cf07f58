package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/fs"
)

// statusSock is the daemon's status socket, in the internal directory
// (0700, root's): only root reaches it.
const statusSock = "status.sock"

func statusSockPath(backing string) string {
	return filepath.Join(backing, fs.InternalDir, statusSock)
}

// statusServer answers `safefs status` on the socket until closed.
type statusServer struct {
	ln   *net.UnixListener
	path string
	done chan struct{}
}

// startStatus listens on BACKING/.safefs/status.sock. A socket left by a
// daemon that died is replaced: BACKING is ours now (the mount holds it).
func startStatus(backing string, srv *fs.Server, log *zap.Logger) (*statusServer, error) {
	p := statusSockPath(backing)
	if c := srv.Cluster(); c != nil {
		// Each node its own: they share .safefs.
		p = filepath.Join(backing, fs.InternalDir, "nodes", c.Config().Node, statusSock)
	}
	_ = os.Remove(p)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(p, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	s := &statusServer{ln: ln, path: p, done: make(chan struct{})}
	go s.serve(srv, log)
	return s, nil
}

func (s *statusServer) serve(srv *fs.Server, log *zap.Logger) {
	defer close(s.done)
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				log.Warn("status socket", zap.Error(err))
			}
			return
		}
		go answerStatus(c, srv, log)
	}
}

// answerStatus writes one JSON snapshot, or a refusal to non-root peers.
func answerStatus(c *net.UnixConn, srv *fs.Server, log *zap.Logger) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	uid, err := peerUID(c)
	if err != nil || uid != 0 {
		log.Warn("status refused to a non-root peer", zap.Uint32("uid", uid), zap.Error(err))
		_ = json.NewEncoder(c).Encode(statusReply{Error: "permission denied: status is for root only"})
		return
	}
	st := srv.Status()
	_ = json.NewEncoder(c).Encode(statusReply{Status: &st})
}

func peerUID(c *net.UnixConn) (uint32, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	err = raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err == nil {
		err = cerr
	}
	if err != nil {
		return ^uint32(0), err
	}
	return cred.Uid, nil
}

// close stops listening and removes the socket.
func (s *statusServer) close() {
	if s == nil {
		return
	}
	_ = s.ln.Close()
	<-s.done
}

// statusReply is what the socket sends: a status or a refusal.
type statusReply struct {
	Error  string     `json:"error,omitempty"`
	Status *fs.Status `json:"status,omitempty"`
}

func runStatus(args []string, stdout io.Writer) error {
	var target string
	asJSON := false
	for _, a := range args {
		switch {
		case a == "--json":
			asJSON = true
		case a == "-h" || a == "--help":
			fmt.Fprintln(stdout, "usage: safefs status MOUNTPOINT|BACKING [--json]")
			return nil
		case strings.HasPrefix(a, "-") || target != "":
			return failf(exitUsage, "usage: safefs status MOUNTPOINT|BACKING [--json]")
		default:
			target = a
		}
	}
	if target == "" {
		return failf(exitUsage, "usage: safefs status MOUNTPOINT|BACKING [--json]")
	}
	st, err := askStatus(target)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	printStatus(stdout, st)
	return nil
}

// askStatus finds the daemon of target (a mount point or its BACKING)
// and asks it. It never looks inside the mount: a stuck mount must not
// hang the tool meant to diagnose it.
func askStatus(target string) (*fs.Status, error) {
	abs, err := filepath.Abs(target)
	if err != nil {
		return nil, failf(exitUsage, "%s: %v", target, err)
	}
	backing, mnt := abs, ""
	if _, src, ok := fs.SafefsMount(abs); ok {
		backing, mnt = src, abs
	}
	p := statusSockPath(backing)
	st, err := askSocket(p)
	var de dialErr
	if errors.As(err, &de) && errors.Is(de.err, syscall.ENOENT) {
		if st, err, ok := askNodes(target, backing, mnt); ok {
			return st, err
		}
	}
	if errors.As(err, &de) {
		return nil, dialError(target, p, de.err)
	}
	return st, err
}

// dialErr: no daemon could be reached on the socket (dialError words it).
type dialErr struct{ err error }

func (e dialErr) Error() string { return e.err.Error() }

// askNodes asks the cluster daemons of this host that serve backing
// (each has its socket in .safefs/nodes/NODE/): the one mounted at mnt,
// or the only one. ok is false when no node answers.
func askNodes(target, backing, mnt string) (*fs.Status, error, bool) {
	socks, _ := filepath.Glob(filepath.Join(backing, fs.InternalDir, "nodes", "*", statusSock))
	var found []*fs.Status
	for _, p := range socks {
		st, err := askSocket(p)
		var de dialErr
		switch {
		case errors.As(err, &de):
			continue // another host's node, or one that exited
		case err != nil:
			return nil, err, true // it answered: denied, or garbled
		case mnt != "" && st.Mountpoint == mnt:
			return st, nil, true
		}
		found = append(found, st)
	}
	switch {
	case len(found) == 0 || mnt != "":
		return nil, nil, false
	case len(found) == 1:
		return found[0], nil, true
	}
	var at []string
	for _, st := range found {
		at = append(at, fmt.Sprintf("node %s at %s", st.Node, st.Mountpoint))
	}
	return nil, failf(exitUsage, "%s is served by several cluster daemons of this host (%s): give the mount point",
		target, strings.Join(at, ", ")), true
}

// askSocket asks the daemon listening on p. Dial errors are returned as
// they are (dialError words them); the others are final.
func askSocket(p string) (*fs.Status, error) {
	c, err := net.DialTimeout("unix", p, 10*time.Second)
	if err != nil {
		return nil, dialErr{err}
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	var rep statusReply
	if err := json.NewDecoder(bufio.NewReader(c)).Decode(&rep); err != nil {
		return nil, failf(exitInternal, "%s: bad answer from the daemon: %v", p, err)
	}
	if rep.Error != "" {
		return nil, failf(exitStatusDenied, "%s: %s", p, rep.Error)
	}
	if rep.Status == nil {
		return nil, failf(exitInternal, "%s: empty answer from the daemon", p)
	}
	return rep.Status, nil
}

func dialError(target, p string, err error) error {
	switch {
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return failf(exitStatusDenied, "%s: permission denied (status is for root only)", p)
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ENOTDIR):
		return failf(exitNotSafefs, "%s is not a safefs mount or BACKING (no %s)", target, p)
	case errors.Is(err, syscall.ECONNREFUSED):
		return failf(exitNotSafefs, "%s: no safefs daemon answers on %s (it exited?)", target, p)
	}
	return failf(exitNotSafefs, "%s: %v", target, err)
}
