package fs

// Every system call on BACKING goes through this file. Each takes a
// directory fd and a single name component; opens use openat2 with
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS (O_NOFOLLOW where the kernel lacks
// openat2), so nothing a caller passes can leave BACKING or follow a
// symlink planted in it. All fds are O_CLOEXEC.

import (
	"errors"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

const resolveSafe = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

var haveOpenat2 = probeOpenat2()

func probeOpenat2() bool {
	fd, err := unix.Openat2(unix.AT_FDCWD, "/", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC})
	if err == nil {
		unix.Close(fd)
	}
	return !errors.Is(err, unix.ENOSYS)
}

// checkName refuses anything that is not one plain name component.
func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return unix.EINVAL
	}
	if len(name) > 255 {
		return unix.ENAMETOOLONG
	}
	return nil
}

// openAt opens name in dir. mode is used only with O_CREAT.
func openAt(dir int, name string, flags int, mode uint32) (int, error) {
	if err := checkName(name); err != nil {
		return -1, err
	}
	return openRel(dir, name, flags, mode)
}

// openRel opens a relative path beneath dir (several components allowed,
// for recovery), never following symlinks and never leaving dir.
func openRel(dir int, rel string, flags int, mode uint32) (int, error) {
	flags |= unix.O_CLOEXEC | unix.O_NOFOLLOW
	if flags&unix.O_CREAT == 0 {
		mode = 0
	}
	if haveOpenat2 {
		how := unix.OpenHow{Flags: uint64(flags), Mode: uint64(mode), Resolve: resolveSafe}
		for {
			fd, err := unix.Openat2(dir, rel, &how)
			if err != unix.EINTR && err != unix.EAGAIN {
				return fd, err
			}
		}
	}
	return openWalk(dir, rel, flags, mode)
}

// openWalk is the fallback for kernels without openat2: one component at
// a time, each opened O_NOFOLLOW.
func openWalk(dir int, rel string, flags int, mode uint32) (int, error) {
	parts := strings.Split(rel, "/")
	cur := dir
	for i, p := range parts {
		if err := checkName(p); err != nil {
			closeIf(cur, dir)
			return -1, err
		}
		if i == len(parts)-1 {
			fd, err := unix.Openat(cur, p, flags, mode)
			closeIf(cur, dir)
			return fd, err
		}
		next, err := unix.Openat(cur, p, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		closeIf(cur, dir)
		if err != nil {
			return -1, err
		}
		cur = next
	}
	return -1, unix.EINVAL
}

func closeIf(fd, keep int) {
	if fd != keep {
		unix.Close(fd)
	}
}

func statAt(dir int, name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := checkName(name); err != nil {
		return st, err
	}
	err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	return st, err
}

func fstat(fd int) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstat(fd, &st)
	return st, err
}

func mkdirAt(dir int, name string, mode uint32) error {
	if err := checkName(name); err != nil {
		return err
	}
	return unix.Mkdirat(dir, name, mode)
}

func mknodAt(dir int, name string, mode uint32, dev int) error {
	if err := checkName(name); err != nil {
		return err
	}
	return unix.Mknodat(dir, name, mode, dev)
}

func symlinkAt(target string, dir int, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	return unix.Symlinkat(target, dir, name)
}

// readlinkFd reads the symlink that an O_PATH|O_NOFOLLOW fd is.
func readlinkFd(fd int) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

func unlinkAt(dir int, name string, flags int) error {
	if err := checkName(name); err != nil {
		return err
	}
	return unix.Unlinkat(dir, name, flags)
}

func renameAt(olddir int, oldname string, newdir int, newname string, flags uint) error {
	if err := checkName(oldname); err != nil {
		return err
	}
	if err := checkName(newname); err != nil {
		return err
	}
	return unix.Renameat2(olddir, oldname, newdir, newname, flags)
}

// tmpfileAt makes a nameless file in dir (open(2) O_TMPFILE).
func tmpfileAt(dir int, mode uint32) (int, error) {
	return unix.Openat(dir, ".", unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, mode)
}

// linkFd gives the open file fd the name newname in newdir: the way to
// name an O_TMPFILE file (through /proc, no capability needed).
func linkFd(fd int, newdir int, newname string) error {
	if err := checkName(newname); err != nil {
		return err
	}
	return unix.Linkat(unix.AT_FDCWD, procPath(fd), newdir, newname, unix.AT_SYMLINK_FOLLOW)
}

// reopenFd opens the file that fd (an O_PATH fd of a regular file)
// names, with flags: every open of a backing regular file goes through
// here. It never waits for another process's lease (lease.go): the open
// is O_NONBLOCK, and one that a lease holds back is errLeased at once.
// O_NONBLOCK changes nothing else for a regular file on Linux (reads and
// writes of one never wait for it, with or without the flag), so no code
// depends on it; it is cleared all the same, so that the descriptor is
// exactly what a plain open gives (os.NewFile would otherwise offer a
// non-blocking one to the poller, a wasted epoll_ctl).
func reopenFd(fd int, flags int) (int, error) {
	for {
		rfd, err := unix.Open(procPath(fd), flags|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		switch err {
		case nil:
		case unix.EINTR:
			continue
		case unix.EWOULDBLOCK:
			return -1, errLeased
		default:
			return -1, err
		}
		if flags&unix.O_NONBLOCK == 0 {
			// F_SETFL sets only the status flags open took (O_APPEND,
			// O_DIRECT, O_NOATIME...): those of flags, without O_NONBLOCK.
			if _, err := unix.FcntlInt(uintptr(rfd), unix.F_SETFL, flags); err != nil {
				unix.Close(rfd)
				return -1, err
			}
		}
		return rfd, nil
	}
}

// procPath names an O_PATH fd so that calls without an fd variant
// (chmod, utimens, xattrs) act on exactly that inode.
func procPath(fd int) string {
	return "/proc/self/fd/" + strconv.Itoa(fd)
}
