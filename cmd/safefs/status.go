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
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/internal/unixsock"
)

// statusSock is the daemon's status socket, in the internal directory
// (0700, root's): only root reaches it.
const statusSock = "status.sock"

func statusSockPath(backing string) string {
	return filepath.Join(backing, fs.InternalDir, statusSock)
}

// statusServer answers `safefs status` on the socket until closed.
type statusServer struct {
	ln   *unixsock.Listener
	done chan struct{}
}

// listenStatus starts the status server of srv in its internal
// directory, reached by the descriptor the daemon checked at mount (in
// cluster mode the node's own: nodes share .safefs).
func listenStatus(srv *fs.Server, log *zap.Logger) (*statusServer, error) {
	dir, err := srv.InternalDir()
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	return startStatus(dir, srv, log)
}

// startStatus listens on status.sock in dir, 0600. A socket left by a
// daemon that died is replaced: BACKING is ours now (the mount holds it).
func startStatus(dir *os.File, srv *fs.Server, log *zap.Logger) (*statusServer, error) {
	ln, err := unixsock.Listen(dir, statusSock, 0o600)
	if err != nil {
		return nil, err
	}
	s := &statusServer{ln: ln, done: make(chan struct{})}
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
		case isHelpFlag(a):
			printStatusUsage(stdout)
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
	dir, err := openDaemonDir(unix.AT_FDCWD, filepath.Dir(p), unix.O_PATH)
	if err != nil {
		return nil, dialError(target, p, err)
	}
	defer dir.Close()
	st, err := askSocket(dir, p)
	var de dialErr
	if errors.As(err, &de) && errors.Is(de.err, syscall.ENOENT) {
		if st, err, ok := askNodes(target, dir, mnt); ok {
			return st, err
		}
	}
	if errors.As(err, &de) {
		return nil, dialError(target, p, de.err)
	}
	return st, err
}

// errNotDaemons: a directory on the way to the socket is not the
// daemon's own; its socket is not asked.
var errNotDaemons = errors.New("not safefs's own")

// openDaemonDir opens dir/nm without following a symlink, and only if it
// is the daemon's as the daemon leaves it: root's, and no one else may
// write it. A writer of BACKING can swap .safefs for a symlink to a
// directory of its own, whose socket would answer root's status.
func openDaemonDir(dir int, nm string, flags int) (*os.File, error) {
	fd, err := unix.Openat(dir, nm, flags|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	var st unix.Stat_t
	if (errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR)) &&
		unix.Fstatat(dir, nm, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
		err = fmt.Errorf("%w (a symlink)", errNotDaemons)
	}
	if err != nil {
		return nil, err
	}
	err = unix.Fstat(fd, &st)
	switch {
	case err != nil:
	case st.Uid != 0:
		err = fmt.Errorf("%w (owned by uid %d)", errNotDaemons, st.Uid)
	case st.Mode&0o022 != 0:
		err = fmt.Errorf("%w (writable by others, mode %04o)", errNotDaemons, st.Mode&0o7777)
	}
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), nm), nil
}

// dialErr: no daemon could be reached on the socket (dialError words it).
type dialErr struct{ err error }

func (e dialErr) Error() string { return e.err.Error() }

// askNodes asks the cluster daemons of this host that serve backing
// (each has its socket in .safefs/nodes/NODE/): the one mounted at mnt,
// or the only one. ok is false when no node answers.
func askNodes(target string, internal *os.File, mnt string) (*fs.Status, error, bool) {
	nodes, err := openDaemonDir(int(internal.Fd()), "nodes", unix.O_RDONLY)
	if err != nil {
		return nil, nil, false
	}
	defer nodes.Close()
	names, _ := nodes.Readdirnames(-1)
	sort.Strings(names)
	var found []*fs.Status
	for _, nm := range names {
		st, err := askNode(nodes, nm, filepath.Join(internal.Name(), "nodes", nm, statusSock))
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

// askNode asks the daemon of node nm, p naming its socket in messages.
func askNode(nodes *os.File, nm, p string) (*fs.Status, error) {
	dir, err := openDaemonDir(int(nodes.Fd()), nm, unix.O_PATH)
	if err != nil {
		return nil, dialErr{err}
	}
	defer dir.Close()
	return askSocket(dir, p)
}

// askSocket asks the daemon listening in dir, through dir's descriptor;
// p names the socket in messages. Dial errors are returned as they are
// (dialError words them); the others are final.
func askSocket(dir *os.File, p string) (*fs.Status, error) {
	at := "/proc/self/fd/" + strconv.Itoa(int(dir.Fd())) + "/" + statusSock
	c, err := net.DialTimeout("unix", at, 10*time.Second)
	if err != nil {
		var oe *net.OpError
		if errors.As(err, &oe) {
			err = oe.Err // without the /proc path
		}
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
	case errors.Is(err, errNotDaemons):
		return failf(exitNotSafefs, "%s: %s is %v: its socket is not asked", target, filepath.Dir(p), err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return failf(exitNotSafefs, "%s: no safefs daemon answers on %s (it exited?)", target, p)
	}
	return failf(exitNotSafefs, "%s: %v", target, err)
}
