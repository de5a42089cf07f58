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
	for off := 0; off < len(m); off += pageSize {
		if err := e.ctx.Err(); err != nil {
			return 0, err
		}
		if want := byte('a' + off%chunk%26); m[off] != want {
			return 0, fmt.Errorf("%s: byte %d is %q through the map, want %q", p, off, m[off], want)
		}
	}
	return float64(len(m)) / 1e6, nil
}
