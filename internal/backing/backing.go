// Package backing makes every system call on the backing directory
// (BACKING) that safefs makes. Each takes a directory fd and a single
// name component; opens use openat2 with RESOLVE_BENEATH|
// RESOLVE_NO_SYMLINKS (O_NOFOLLOW where the kernel lacks openat2), so
// nothing a caller passes can leave BACKING or follow a symlink planted
// in it. All fds are O_CLOEXEC. Regular files are opened by reopening an
// O_PATH fd checked to be one (OpenRegular, ReopenFd), never waiting
// for another process's lease (lease.go).
package backing

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"

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

// CheckName refuses anything that is not one plain name component.
func CheckName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return unix.EINVAL
	}
	if len(name) > 255 {
		return unix.ENAMETOOLONG
	}
	return nil
}

// OpenAt opens name in dir. mode is used only with O_CREAT.
func OpenAt(dir int, name string, flags int, mode uint32) (int, error) {
	if err := CheckName(name); err != nil {
		return -1, err
	}
	return OpenRel(dir, name, flags, mode)
}

// OpenRel opens a relative path beneath dir (several components allowed,
// for recovery), never following symlinks and never leaving dir.
func OpenRel(dir int, rel string, flags int, mode uint32) (int, error) {
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
		if err := CheckName(p); err != nil {
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

// closeIf closes fd unless it is keep (a walk's starting directory).
func closeIf(fd, keep int) {
	if fd != keep {
		unix.Close(fd)
	}
}

// StatAt is lstat of name in dir: a symlink is not followed.
func StatAt(dir int, name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := CheckName(name); err != nil {
		return st, err
	}
	err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	return st, err
}

// Fstat is fstat(2), returning the stat.
func Fstat(fd int) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstat(fd, &st)
	return st, err
}

// MkdirAt makes directory name in dir.
func MkdirAt(dir int, name string, mode uint32) error {
	if err := CheckName(name); err != nil {
		return err
	}
	return unix.Mkdirat(dir, name, mode)
}

// MknodAt makes the special file name in dir.
func MknodAt(dir int, name string, mode uint32, dev int) error {
	if err := CheckName(name); err != nil {
		return err
	}
	return unix.Mknodat(dir, name, mode, dev)
}

// SymlinkAt makes name in dir a symlink to target.
func SymlinkAt(target string, dir int, name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	return unix.Symlinkat(target, dir, name)
}

// ReadlinkFd reads the symlink that an O_PATH|O_NOFOLLOW fd is.
func ReadlinkFd(fd int) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// UnlinkAt removes name from dir (AT_REMOVEDIR in flags: a directory).
func UnlinkAt(dir int, name string, flags int) error {
	if err := CheckName(name); err != nil {
		return err
	}
	return unix.Unlinkat(dir, name, flags)
}

// RenameAt is renameat2(2) of one name to another (flags: RENAME_*).
func RenameAt(olddir int, oldname string, newdir int, newname string, flags uint) error {
	if err := CheckName(oldname); err != nil {
		return err
	}
	if err := CheckName(newname); err != nil {
		return err
	}
	return unix.Renameat2(olddir, oldname, newdir, newname, flags)
}

// TmpfileAt makes a nameless file in dir (open(2) O_TMPFILE).
func TmpfileAt(dir int, mode uint32) (int, error) {
	return unix.Openat(dir, ".", unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, mode)
}

// LinkFd gives the open file fd the name newname in newdir: the way to
// name an O_TMPFILE file (through /proc, no capability needed).
func LinkFd(fd int, newdir int, newname string) error {
	if err := CheckName(newname); err != nil {
		return err
	}
	return unix.Linkat(unix.AT_FDCWD, ProcPath(fd), newdir, newname, unix.AT_SYMLINK_FOLLOW)
}

// OpenRegular opens dir/nm only if it is a regular file: it is looked at
// through O_PATH first, so a FIFO or device planted in BACKING is never
// opened (no hang, no side effect), then that very inode is reopened.
func OpenRegular(dir int, nm string, flags int) (*os.File, error) {
	f, _, err := OpenRegularStat(dir, nm, flags)
	return f, err
}

// OpenRegularStat is OpenRegular that also gives the file's stat, taken
// on the O_PATH descriptor: the file opened is that very inode.
func OpenRegularStat(dir int, nm string, flags int) (*os.File, unix.Stat_t, error) {
	fd, err := OpenAt(dir, nm, unix.O_PATH, 0)
	if err != nil {
		return nil, unix.Stat_t{}, err
	}
	defer unix.Close(fd)
	st, err := Fstat(fd)
	if err != nil {
		return nil, st, err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		return nil, st, syscall.EISDIR
	case unix.S_IFLNK:
		return nil, st, syscall.ELOOP
	default:
		return nil, st, syscall.ENXIO
	}
	rfd, err := ReopenFd(fd, flags)
	if err != nil {
		return nil, st, err
	}
	return os.NewFile(uintptr(rfd), nm), st, nil
}

// ReopenFd opens the file that fd (an O_PATH fd of a regular file)
// names, with flags: every open of a backing regular file goes through
// here. It never waits for another process's lease (lease.go): the open
// is O_NONBLOCK, and one that a lease holds back is ErrLeased at once.
// O_NONBLOCK changes nothing else for a regular file on Linux (reads and
// writes of one never wait for it, with or without the flag), so no code
// depends on it; it is cleared all the same, so that the descriptor is
// exactly what a plain open gives (os.NewFile would otherwise offer a
// non-blocking one to the poller, a wasted epoll_ctl).
func ReopenFd(fd int, flags int) (int, error) {
	for {
		rfd, err := unix.Open(ProcPath(fd), flags|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		switch err {
		case nil:
		case unix.EINTR:
			continue
		case unix.EWOULDBLOCK:
			return -1, ErrLeased
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

// ProcPath names an O_PATH fd so that calls without an fd variant
// (chmod, utimens, xattrs) act on exactly that inode.
func ProcPath(fd int) string {
	return "/proc/self/fd/" + strconv.Itoa(fd)
}

// FsyncDir makes a rename or unlink in dir durable. dir is an O_PATH fd,
// which fsync refuses, so it is reopened for reading.
func FsyncDir(dir int) error {
	fd, err := unix.Openat(dir, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fsync(fd)
}

// WriteWhole makes b the content of nm in dir (an fd open for reading)
// so that a crash leaves the old or the new content: written to
// nm.tmp, fsync'd, renamed over nm, and dir fsync'd.
func WriteWhole(dir int, nm string, b []byte) error {
	tmp := nm + ".tmp"
	fd, err := OpenAt(dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = RenameAt(dir, tmp, dir, nm, 0)
	}
	if err != nil {
		_ = UnlinkAt(dir, tmp, 0)
		return err
	}
	return unix.Fsync(dir)
}

// ReadDirNames lists the names in directory dir (an O_PATH fd will do):
// all of them, or those read before an error, with the error.
func ReadDirNames(dir int) ([]string, error) {
	fd, err := unix.Openat(dir, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	d := os.NewFile(uintptr(fd), ".")
	defer d.Close()
	return d.Readdirnames(-1)
}
