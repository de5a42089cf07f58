package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/unixsock"
)

// unixPrefix marks an address of metrics or pprof that is a unix
// socket's path (metrics=unix:/run/safefs/metrics.sock). A TCP address,
// loopback included, is open to every local user: metrics show paths,
// profiles show memory, and a user who keeps asking for profiles slows
// every request down. The socket is 0600: the daemon's user (root) only.
const unixPrefix = "unix:"

// unixAddr checks a unix:PATH value and makes PATH absolute (the
// background daemon changes to /).
func unixAddr(v string) (string, error) {
	p := strings.TrimPrefix(v, unixPrefix)
	if p == "" || strings.HasSuffix(p, "/") {
		return "", errors.New("want unix:PATH, the socket's path, such as unix:/run/safefs/metrics.sock")
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	return unixPrefix + abs, nil
}

// listen listens on addr: HOST:PORT (TCP), or unix:PATH (see listenUnix).
func listen(addr string) (net.Listener, error) {
	if p, ok := strings.CutPrefix(addr, unixPrefix); ok {
		return listenUnix(p)
	}
	return net.Listen("tcp", addr)
}

// listenUnix makes the socket p, mode 0600, through its directory's
// descriptor: no symlink at p is followed (one there is refused, as is
// any file but a stale socket), and the socket never exists with a wider
// mode. The directory must be root's (or the daemon's user's) and
// writable by no one else, unless sticky (/tmp): whoever may rename in it
// could put a socket of their own in the daemon's place.
func listenUnix(p string) (net.Listener, error) {
	fd, err := unix.Open(filepath.Dir(p), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: filepath.Dir(p), Err: err}
	}
	dir := os.NewFile(uintptr(fd), filepath.Dir(p))
	defer dir.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(dir.Fd()), &st); err != nil {
		return nil, err
	}
	if st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("%s: the directory is uid %d's: want one that only root may write", dir.Name(), st.Uid)
	}
	if st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0 {
		return nil, fmt.Errorf("%s: the directory is writable by others (mode %04o): want one that only root may write",
			dir.Name(), st.Mode&0o7777)
	}
	return unixsock.Listen(dir, filepath.Base(p), 0o600)
}

// describeAddr is how the log names what listens on addr, under url.
func describeAddr(ln net.Listener, path string) (string, string) {
	if l, ok := ln.(*unixsock.Listener); ok {
		return "socket", l.Path()
	}
	return "url", "http://" + ln.Addr().String() + path
}
