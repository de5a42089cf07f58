package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/safefs/safefs/internal/mountinfo"
)

// devFuseEnv names a hidden environment variable, for tests only: the path
// preflight checks instead of /dev/fuse, so a test can simulate a machine
// without FUSE. It is not documented to users and fs ignores it.
const devFuseEnv = "SAFEFS_DEV_FUSE"

// preflightMount refuses, before anything is touched, every setup we can
// recognise as wrong. It returns BACKING and MOUNTPOINT absolute and free
// of symlinks.
// allowOther is the mount's option, which a user other than root may ask
// for only where /etc/fuse.conf lets it.
func preflightMount(backing, mountpoint string, allowOther bool) (string, string, error) {
	if err := checkDir("backing directory", backing); err != nil {
		return "", "", err
	}
	if err := checkMountpointDir(mountpoint); err != nil {
		return "", "", err
	}
	b, err := resolve("backing directory", backing)
	if err != nil {
		return "", "", err
	}
	m, err := resolve("mountpoint", mountpoint)
	if err != nil {
		return "", "", err
	}
	if err := checkNesting(b, m); err != nil {
		return "", "", err
	}
	if err := checkNotMounted(m); err != nil {
		return "", "", err
	}
	if err := checkDevFuse(); err != nil {
		return "", "", err
	}
	if err := checkFusermount(os.Geteuid(), exec.LookPath); err != nil {
		return "", "", err
	}
	return b, m, checkUserAllowOther(os.Geteuid(), allowOther, fuseConf)
}

func checkDir(role, path string) error {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return failf(exitBadDirs, "%s %s does not exist", role, path)
	case err != nil:
		return failf(exitBadDirs, "%s: %v", role, err)
	case !st.IsDir():
		return failf(exitBadDirs, "%s %s is not a directory", role, path)
	}
	return nil
}

// checkMountpointDir catches a FUSE mount whose server died: stat fails
// with ENOTCONN, and the user needs to know how to clear it.
func checkMountpointDir(path string) error {
	if _, err := os.Stat(path); errors.Is(err, syscall.ENOTCONN) {
		return failf(exitMounted, "mountpoint %s is a stale FUSE mount (transport endpoint is not connected); clear it with: umount -l %s (or fusermount3 -uz %s)", path, path, path)
	}
	return checkDir("mountpoint", path)
}

func resolve(role, path string) (string, error) {
	p, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", failf(exitBadDirs, "%s: %v", role, err)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", failf(exitBadDirs, "%s: %v", role, err)
	}
	return abs, nil
}

// checkNesting refuses overlapping trees: serving a directory on itself or
// inside itself would make safefs see its own mount.
func checkNesting(b, m string) error {
	switch {
	case b == m:
		return failf(exitBadDirs, "backing directory and mountpoint are the same directory: %s", b)
	case isWithin(m, b):
		return failf(exitBadDirs, "mountpoint %s is inside backing directory %s", m, b)
	case isWithin(b, m):
		return failf(exitBadDirs, "backing directory %s is inside mountpoint %s", b, m)
	}
	return nil
}

// isWithin reports whether path is parent or below it. Both are clean
// absolute paths.
func isWithin(path, parent string) bool {
	if parent == "/" {
		return true
	}
	return path == parent || strings.HasPrefix(path, parent+"/")
}

func checkNotMounted(m string) error {
	mounts, err := mountinfo.Read(mountinfo.Self)
	if err != nil {
		return fmt.Errorf("read mount table: %w", err)
	}
	for _, p := range mounts {
		if p.Point == m {
			return failf(exitMounted, "mountpoint %s is already a mount point; unmount it or choose another directory", m)
		}
	}
	return nil
}

func devFusePath() string {
	if p := os.Getenv(devFuseEnv); p != "" {
		return p
	}
	return "/dev/fuse"
}

func checkDevFuse() error {
	p := devFusePath()
	st, err := os.Stat(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return failf(exitNoFuse, "%s does not exist: load the fuse kernel module (modprobe fuse), or in a container pass the device in (--device /dev/fuse)", p)
	case err != nil:
		return failf(exitNoFuse, "cannot use FUSE device: %v", err)
	case st.Mode()&os.ModeCharDevice == 0:
		return failf(exitNoFuse, "%s is not a character device", p)
	}
	return nil
}
