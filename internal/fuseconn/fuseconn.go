// Package fuseconn finds a FUSE mount's connection from outside: its
// number (the minor of the mount's device), whether a mount namespace
// other than this process's still has it mounted, and its directory in
// fusectl, whose abort file ends it.
package fuseconn

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/mountinfo"
)

// fusectl is where the kernel lists FUSE connections, by device minor.
const fusectl = "/sys/fs/fuse/connections"

// fusectlMagic is fusectl's f_type (FUSE_CTL_SUPER_MAGIC).
const fusectlMagic = 0x65735543

// Of is the connection of the FUSE mount at mountpoint: the minor of its
// device (fusectl's directory name); ok false if it cannot be stat'd.
func Of(mountpoint string) (conn uint32, ok bool) {
	var st unix.Stat_t
	if err := unix.Stat(mountpoint, &st); err != nil {
		return 0, false
	}
	return unix.Minor(st.Dev), true
}

// MountedElsewhere reports whether a mount namespace other than this
// process's has connection conn's file system mounted (mountinfo's
// device 0:conn).
func MountedElsewhere(conn uint32) bool {
	if conn == 0 {
		return false
	}
	return mountinfo.Elsewhere("0:" + strconv.FormatUint(uint64(conn), 10))
}

// Dir is connection conn's directory in fusectl, which is mounted if it
// is not (a container, a minimal system); os.ErrNotExist when the
// connection is gone.
func Dir(conn uint32) (string, error) {
	if conn == 0 {
		return "", errors.New("connection unknown")
	}
	dir := filepath.Join(fusectl, strconv.FormatUint(uint64(conn), 10))
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(fusectl, &fs); err != nil {
		return "", err
	}
	if fs.Type != fusectlMagic {
		if err := unix.Mount("fusectl", fusectl, "fusectl", 0, ""); err != nil {
			return "", err
		}
	}
	_, err := os.Stat(dir)
	return dir, err
}

// Abort ends the connection whose fusectl directory is dir (Dir): its
// requests in flight and to come fail with ENOTCONN.
func Abort(dir string) error {
	return os.WriteFile(filepath.Join(dir, "abort"), []byte("1"), 0)
}
