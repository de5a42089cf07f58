// Package unixsock makes listening unix sockets in a directory held by
// its descriptor. A root daemon that binds, chmods or removes a socket by
// path follows whatever the path leads to at that moment: a directory
// on the way swapped for a symlink sends it elsewhere. Here every step
// goes through the directory's descriptor (bind through its
// /proc/self/fd path, lstat and unlink at the descriptor), and the mode
// is the socket's before bind, so the file never exists with another.
package unixsock

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// ErrNotSocket: the name is taken by something that is not a socket,
// which Listen never removes.
var ErrNotSocket = errors.New("exists and is not a socket")

// Listener is a listening unix stream socket in a directory; Close
// removes its file if that is still the socket Listen made.
type Listener struct {
	*net.UnixListener
	dir  int // a duplicate of the directory's descriptor
	name string
	path string // for messages
	key  [2]uint64
	once sync.Once
	err  error
}

// Listen listens on dir/name, a socket of mode perm. dir is the
// directory's descriptor (O_PATH will do); it is duplicated, so the
// caller may close it. A socket left at name by a process that no
// longer listens is replaced; one still listened on is EADDRINUSE, and
// any other file ErrNotSocket.
func Listen(dir *os.File, name string, perm os.FileMode) (*Listener, error) {
	path := filepath.Join(dir.Name(), name)
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return nil, &os.PathError{Op: "listen", Path: path, Err: unix.EINVAL}
	}
	d, err := unix.FcntlInt(dir.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "listen", Path: path, Err: err}
	}
	l := &Listener{dir: d, name: name, path: path}
	if err := l.listen(perm); err != nil {
		unix.Close(d)
		return nil, &os.PathError{Op: "listen", Path: path, Err: err}
	}
	return l, nil
}

// at is name through the directory's descriptor, for bind and connect,
// which have no *at variant.
func (l *Listener) at() (string, error) {
	p := "/proc/self/fd/" + strconv.Itoa(l.dir) + "/" + l.name
	if len(p) >= len(unix.RawSockaddrUnix{}.Path) {
		return "", unix.ENAMETOOLONG
	}
	return p, nil
}

func (l *Listener) listen(perm os.FileMode) error {
	at, err := l.at()
	if err != nil {
		return err
	}
	if err := l.removeStale(at); err != nil {
		return err
	}
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(s), l.path)
	defer f.Close()
	// Linux makes the file with the socket inode's mode, less the umask
	// (unix_bind): set here, it is the file's from its first instant.
	if err := unix.Fchmod(s, uint32(perm.Perm())); err != nil {
		return err
	}
	if err := unix.Bind(s, &unix.SockaddrUnix{Name: at}); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(l.dir, l.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return fmt.Errorf("replaced right after bind: %w", ErrNotSocket)
	}
	l.key = [2]uint64{uint64(st.Dev), uint64(st.Ino)}
	if got := os.FileMode(st.Mode).Perm(); got&^perm.Perm() != 0 {
		_ = l.remove()
		return fmt.Errorf("socket made with mode %04o, not %04o", got, perm.Perm())
	}
	if err := unix.Listen(s, unix.SOMAXCONN); err != nil {
		_ = l.remove()
		return err
	}
	ln, err := net.FileListener(f)
	if err != nil {
		_ = l.remove()
		return err
	}
	l.UnixListener = ln.(*net.UnixListener)
	l.UnixListener.SetUnlinkOnClose(false) // its path is the /proc one: ours to remove
	return nil
}

// removeStale removes a socket at name that nothing listens on.
func (l *Listener) removeStale(at string) error {
	var st unix.Stat_t
	err := unix.Fstatat(l.dir, l.name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return ErrNotSocket
	}
	// Non-blocking: a listener whose queue is full is one in use.
	c, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return err
	}
	err = unix.Connect(c, &unix.SockaddrUnix{Name: at})
	unix.Close(c)
	if err == nil || errors.Is(err, unix.EAGAIN) {
		return unix.EADDRINUSE
	}
	if !errors.Is(err, unix.ECONNREFUSED) {
		return err
	}
	if err := unix.Unlinkat(l.dir, l.name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}

// Path is the socket's path when Listen was called, for messages.
func (l *Listener) Path() string { return l.path }

// Close stops listening and removes the socket file, if name still
// leads to the socket Listen made.
func (l *Listener) Close() error {
	l.once.Do(func() {
		l.err = l.UnixListener.Close()
		if err := l.remove(); err != nil && l.err == nil {
			l.err = &os.PathError{Op: "remove", Path: l.path, Err: err}
		}
		unix.Close(l.dir)
	})
	return l.err
}

func (l *Listener) remove() error {
	var st unix.Stat_t
	err := unix.Fstatat(l.dir, l.name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	if [2]uint64{uint64(st.Dev), uint64(st.Ino)} != l.key {
		return nil // another's now
	}
	return unix.Unlinkat(l.dir, l.name, 0)
}
