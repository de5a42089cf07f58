package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

const pageSize = 4096 // mmap-read touches one byte in each

// mmapSetup writes the file through the target, in chunk-long patterns.
func mmapSetup(e *env) error {
	return writeSeq(e.ctx, e.path("map"), e.cfg.mmapSize)
}

// mmapChildEnv makes the bench binary (or its test binary) the child
// that maps: a page fault on a mount this process serves could wait
// forever on the Go runtime's stop-the-world, which stops the server too.
const mmapChildEnv = "SAFEFS_BENCH_MMAP"

// mmapRead has a child process map the file shared and read-only, as
// GDBM and NDBM do, and read one byte of every page, checking it against
// the pattern written. The child times the map and the reads.
func mmapRead(e *env) (float64, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(e.ctx, exe)
	cmd.Env = append(os.Environ(), mmapChildEnv+"="+strconv.FormatInt(e.cfg.mmapSize, 10)+":"+e.path("map"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%s (%w)", strings.TrimSpace(string(out)), err)
	}
	secs, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	if err != nil {
		return 0, fmt.Errorf("mmap child said %q", out)
	}
	return float64(e.cfg.mmapSize) / 1e6 / secs, nil
}

// mmapChild is the child's side: it prints the seconds taken, or the
// error (with the errno's name) and exits 1.
func mmapChild(arg string) int {
	n, p, _ := strings.Cut(arg, ":")
	size, err := strconv.Atoi(n)
	if err == nil {
		var secs float64
		if secs, err = mapAndTouch(p, size); err == nil {
			fmt.Println(secs)
			return 0
		}
	}
	fmt.Println(err)
	return 1
}

func mapAndTouch(p string, size int) (float64, error) {
	start := time.Now()
	fd, err := retry(func() (int, error) { return unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0) })
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p, err)
	}
	defer unix.Close(fd)
	m, err := unix.Mmap(fd, 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, fmt.Errorf("mmap %s: %w", p, err)
	}
	defer unix.Munmap(m)
	for off := 0; off < len(m); off += pageSize {
		if want := byte('a' + off%chunk%26); m[off] != want {
			return 0, fmt.Errorf("%s: byte %d is %q through the map, want %q", p, off, m[off], want)
		}
	}
	return time.Since(start).Seconds(), nil
}
