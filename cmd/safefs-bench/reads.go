package main

import (
	"fmt"

	"golang.org/x/sys/unix"
)

const pageSize = 4096 // mmap-read touches one byte in each

// mmapSetup writes the file through the target, in chunk-long patterns.
func mmapSetup(e *env) error {
	return writeSeq(e.ctx, e.path("map"), e.cfg.mmapSize)
}

// mmapRead maps the file shared and read-only, as GDBM and NDBM do, and
// reads one byte of every page, checking it against the pattern written.
func mmapRead(e *env) (float64, error) {
	p := e.path("map")
	fd, err := retry(func() (int, error) { return unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0) })
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p, err)
	}
	defer unix.Close(fd)
	m, err := unix.Mmap(fd, 0, int(e.cfg.mmapSize), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, fmt.Errorf("mmap %s: %w", p, err)
	}
	defer unix.Munmap(m)
	// Pages are touched inside a system call (a write from the map to a
	// memfd), never by a load in Go: a fault served by a FUSE daemon in
	// this very process would block a thread the runtime must stop for
	// GC, while the daemon's goroutines wait for that stop: a deadlock.
	mfd, err := unix.MemfdCreate("safefs-bench-mmap", unix.MFD_CLOEXEC)
	if err != nil {
		return 0, err
	}
	defer unix.Close(mfd)
	got := make([]byte, 1)
	for off := 0; off < len(m); off += pageSize {
		if err := e.ctx.Err(); err != nil {
			return 0, err
		}
		if _, err := retry(func() (int, error) { return unix.Pwrite(mfd, m[off:off+1], 0) }); err != nil {
			return 0, fmt.Errorf("%s: byte %d through the map: %w", p, off, err)
		}
		if _, err := retry(func() (int, error) { return unix.Pread(mfd, got, 0) }); err != nil {
			return 0, err
		}
		if want := byte('a' + off%chunk%26); got[0] != want {
			return 0, fmt.Errorf("%s: byte %d is %q through the map, want %q", p, off, got[0], want)
		}
	}
	return float64(len(m)) / 1e6, nil
}
