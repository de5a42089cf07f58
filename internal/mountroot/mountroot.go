// Package mountroot swaps a mount for a bind mount of one of its
// entries, with the new mount API (open_tree, move_mount): fs mounts a
// small hidden root and puts its one entry, BACKING's top, on the mount
// point in its place, so that the kernel's root inode of the FUSE mount,
// whose ACL it never caches, is never walked through (docs/design.md,
// "The mount's root").
package mountroot

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// ErrSwap: the mount is up but could not be swapped; ErrSwapDetached:
// nor is it mounted any more.
var (
	ErrSwap         = errors.New("cannot swap the mount's root")
	ErrSwapDetached = fmt.Errorf("%w after detaching it", ErrSwap)
)

// CanSwap reports whether this process can swap the mount on mountpoint
// (CAP_SYS_ADMIN on Linux 5.2+): the probe is a detached copy of the
// mount point's own mount, dropped at once.
func CanSwap(mountpoint string) bool {
	fd, err := unix.OpenTree(unix.AT_FDCWD, mountpoint, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}

// Swap replaces the mount on mountpoint by a bind mount of its entry
// name. The bind keeps the mount's connection: the mount it came from is
// detached, and an unmount of mountpoint ends both.
func Swap(mountpoint, name string) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, mountpoint+"/"+name, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("%w: open_tree: %v", ErrSwap, err)
	}
	defer unix.Close(fd)
	if err := unix.Unmount(mountpoint, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("%w: detach: %v", ErrSwap, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, mountpoint, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		// Closing fd drops the last mount: the connection ends.
		return fmt.Errorf("%w: move_mount: %v", ErrSwapDetached, err)
	}
	return nil
}
