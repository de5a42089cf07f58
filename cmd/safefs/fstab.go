package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// The fstab form is `safefs BACKING MOUNTPOINT [-o OPTS]`: what fuse3's
// mount.fuse3 runs (through /bin/sh, finding safefs in PATH) for
// `mount -t fuse.safefs` and an fstab line of type fuse.safefs. It is
// recognised by a first argument that is no command but a path: it holds
// a slash or names a directory.
func isFstabForm(args []string) bool {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return false
	}
	if strings.Contains(args[0], "/") {
		return true
	}
	st, err := os.Stat(args[0])
	return err == nil && st.IsDir()
}

// runFstab serves in the background, returning once the mount is ready
// (exit 0) or has failed (its exit code), unless -f or -o foreground.
func runFstab(args []string, stdout, stderr io.Writer) error {
	a, err := parseMountArgs(args)
	if err != nil {
		return err
	}
	if a.help {
		printMountUsage(stdout)
		return nil
	}
	if strings.HasPrefix(a.mountpoint, "/dev/fd/") {
		return failf(exitUsage, "mountpoint %s: mount.fuse3's drop_privileges is not supported; safefs mounts itself", a.mountpoint)
	}
	if pipe, ok, err := readyPipeFromEnv(); err != nil {
		return err
	} else if ok {
		return runDaemon(a, pipe, stderr)
	}
	if a.cfg.foreground {
		return mountAndServe(a, stderr, nil)
	}
	return startDaemon(args, a, stderr)
}

// ignoredOptions are mount(8), fstab and mount.fuse3 options that mean
// nothing to safefs: accepted and dropped, as other FUSE file systems do.
// dev and suid (which mount.fuse3 adds) are ignored: the mount stays
// nodev,nosuid.
var ignoredOptions = map[string]bool{
	"defaults": true, "auto": true, "noauto": true, "user": true, "nouser": true, "users": true,
	"nofail": true, "_netdev": true, "dev": true, "nodev": true, "suid": true, "nosuid": true,
	"exec": true, "async": true, "atime": true, "noatime": true, "relatime": true,
	"strictatime": true, "diratime": true, "nodiratime": true, "lazytime": true, "nolazytime": true,
}

// ignoredPrefixes: x-systemd.*, X-*, and fstab comments are for other
// programs.
var ignoredPrefixes = []string{"x-", "X-", "comment="}

func ignoredOption(item string) bool {
	if ignoredOptions[item] {
		return true
	}
	for _, p := range ignoredPrefixes {
		if strings.HasPrefix(item, p) {
			return true
		}
	}
	return false
}

// refusedOptions would change what the mount promises; safefs cannot
// honour them, so it says so instead of ignoring them.
var refusedOptions = map[string]string{
	"noexec":  "safefs mounts always allow exec",
	"sync":    "use durability=full, the default, for durable commits",
	"dirsync": "use durability=full, the default, for durable commits",
	"mand":    "mandatory locks are not supported",
}

func setLogFile(c *mountConfig, v string) error {
	if !filepath.IsAbs(v) {
		return errors.New("want an absolute path")
	}
	c.logFile = v
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
