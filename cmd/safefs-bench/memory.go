package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// memoryRun measures the resident memory of a safefs daemon (the goal:
// growth within 32 MiB): a child daemon of the target's options on a
// fresh directory of its own, so "after mount" is a fresh daemon's and
// the figures are the daemon's alone. Its cell: RSS after mount, the
// growth after cfg.memFiles files and after cfg.memSize bytes through
// one handle, the peak's growth (VmHWM), and, to tell live memory from
// garbage, the growth after a GC in the daemon and after the kernel
// dropped its caches (and so forgot the files' inodes) and a GC. It
// returns the growth after the writes.
func memoryRun(e *env) (_ float64, err error) {
	root, err := os.MkdirTemp(e.root, "memory-")
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, os.RemoveAll(root)) }()
	raw, mnt := filepath.Join(root, "backing"), filepath.Join(root, "mnt")
	for _, d := range []string{raw, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return 0, err
		}
	}
	c, err := startChild(e.target, raw, mnt)
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, c.stop()) }()
	var kib [6]int64 // mount, files, write, peak, GC, forgotten
	if kib[0], err = vmKiB(c.pid, "VmRSS"); err != nil {
		return 0, err
	}
	if err := memoryFiles(e, mnt); err != nil {
		return 0, err
	}
	if kib[1], err = vmKiB(c.pid, "VmRSS"); err != nil {
		return 0, err
	}
	if err := writeSeq(e.ctx, filepath.Join(mnt, "big"), e.cfg.memSize); err != nil {
		return 0, err
	}
	if kib[2], err = vmKiB(c.pid, "VmRSS"); err != nil {
		return 0, err
	}
	if kib[3], err = vmKiB(c.pid, "VmHWM"); err != nil {
		return 0, err
	}
	if kib[4], kib[5], err = memoryFreed(c); err != nil {
		return 0, err
	}
	e.extra = fmt.Sprintf("%.1f MiB after mount, %+.1f after %d files, %+.1f after %s (peak %+.1f; after GC %+.1f, after drop_caches and GC %+.1f)",
		mib(kib[0]), mib(kib[1]-kib[0]), e.cfg.memFiles, mib(kib[2]-kib[0]), sizeFlag(e.cfg.memSize),
		mib(kib[3]-kib[0]), mib(kib[4]-kib[0]), mib(kib[5]-kib[0]))
	return mib(kib[2] - kib[0]), nil
}

// memoryFiles creates the files, 4 KiB each, through the mount.
func memoryFiles(e *env, mnt string) error {
	for i := range e.cfg.memFiles {
		if err := e.ctx.Err(); err != nil {
			return err
		}
		if err := writeFile(filepath.Join(mnt, fmt.Sprintf("f%06d", i)), unix.O_CREAT|unix.O_EXCL, block4k); err != nil {
			return err
		}
	}
	return nil
}

// memoryFreed is the daemon's RSS after a GC, and after the kernel
// dropped its caches (as root; else the inodes stay) and another GC.
func memoryFreed(c *child) (gc, forgotten int64, err error) {
	if err := c.freeMemory(); err != nil {
		return 0, 0, err
	}
	if gc, err = vmKiB(c.pid, "VmRSS"); err != nil {
		return 0, 0, err
	}
	dropCaches()
	if err := c.freeMemory(); err != nil {
		return 0, 0, err
	}
	forgotten, err = vmKiB(c.pid, "VmRSS")
	return gc, forgotten, err
}

func mib(kib int64) float64 { return float64(kib) / 1024 }

// vmKiB reads field (VmRSS, VmHWM) of /proc/pid/status, in KiB.
func vmKiB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		v, ok := strings.CutPrefix(l, field+":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("/proc/%d/status: %q", pid, l)
		}
		return strconv.ParseInt(f[0], 10, 64)
	}
	return 0, fmt.Errorf("/proc/%d/status: no %s", pid, field)
}
