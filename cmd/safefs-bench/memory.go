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

// memoryRun measures the resident memory of a safefs daemon (issue 12:
// growth within 32 MiB): a child daemon of the target's options on a
// fresh directory of its own, so "after mount" is a fresh daemon's and
// the figures are the daemon's alone. Its cell: RSS after mount, the
// growth after cfg.memFiles files and after cfg.memSize bytes through
// one handle, and the peak's growth (VmHWM). It returns the final growth.
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
	unmount, pid, err := mountChild(e.target, raw, mnt)
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, unmount()) }()

	base, err := vmKiB(pid, "VmRSS")
	if err != nil {
		return 0, err
	}
	for i := range e.cfg.memFiles {
		if err := e.ctx.Err(); err != nil {
			return 0, err
		}
		if err := writeFile(filepath.Join(mnt, fmt.Sprintf("f%06d", i)), unix.O_CREAT|unix.O_EXCL, block4k); err != nil {
			return 0, err
		}
	}
	files, err := vmKiB(pid, "VmRSS")
	if err != nil {
		return 0, err
	}
	if err := writeSeq(e.ctx, filepath.Join(mnt, "big"), e.cfg.memSize); err != nil {
		return 0, err
	}
	end, err := vmKiB(pid, "VmRSS")
	if err != nil {
		return 0, err
	}
	peak, err := vmKiB(pid, "VmHWM")
	if err != nil {
		return 0, err
	}
	e.extra = fmt.Sprintf("%.1f MiB after mount, %+.1f after %d files, %+.1f after %s (peak %+.1f)",
		mib(base), mib(files-base), e.cfg.memFiles, mib(end-base), sizeFlag(e.cfg.memSize), mib(peak-base))
	return mib(end - base), nil
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
