// Package proc reads what safefs learns about its callers from /proc:
// whether a process is dying from a signal, a thread's process, its
// parents and descendants, its command line and request, its
// descriptors and locks, and the holders of leases.
//
// Reading /proc of a process blocks while it is in execve, and execve
// may itself wait for the very request being served (it closes
// inherited descriptors): every read about a process is bounded (Wait,
// or SessionWait for what decides a read-modify-write session), and an
// answer that does not come is the function's default. Files are read
// with plain system calls: os.Open and os.ReadFile try to register the
// descriptor with the poller and fstat it, all wasted on /proc.
package proc

import (
	"bufio"
	"bytes"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Wait bounds a read of /proc about a process (see the package doc).
const Wait = 100 * time.Millisecond

// SessionWait bounds the reads that decide a read-modify-write session
// (IsFamily, Program, ShortCmdline, HoldsLock, RequestFeatures,
// TgidOrSelf). They are about the caller, which is waiting in this very
// open: longer than Wait, since a read that does not come in time on a
// loaded machine would cost a session (each one missed loses up to as
// many increments as there are waiters).
const SessionWait = 2 * time.Second

func bounded[T any](def T, fn func() T) T { return boundedFor(Wait, def, fn) }

// boundedFor is bounded with a wait of its own.
func boundedFor[T any](wait time.Duration, def T, fn func() T) T {
	ch := make(chan T, 1)
	go func() { ch <- fn() }()
	select {
	case v := <-ch:
		return v
	case <-time.After(wait):
		return def
	}
}

func sessionBounded[T any](def T, fn func() T) T { return boundedFor(SessionWait, def, fn) }

// pidPath is /proc/<pid>/name.
func pidPath(pid uint32, name string) string {
	return "/proc/" + strconv.FormatUint(uint64(pid), 10) + "/" + name
}

// Status returns one field of /proc/<pid>/status, "" if unknown.
func Status(pid uint32, field string) string { return statusWithin(Wait, pid, field) }

// statusWithin is Status bounded by wait.
func statusWithin(wait time.Duration, pid uint32, field string) string {
	if pid == 0 {
		return ""
	}
	return boundedFor(wait, "", func() string { return readStatus(pid, field) })
}

func readStatus(pid uint32, field string) string {
	b, err := readProc(pidPath(pid, "status"))
	if err != nil {
		return ""
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}

// statField returns field n (from 1, as proc(5) counts) of
// /proc/<pid>/stat, for n past the command name (field 2).
func statField(pid uint32, n int) (string, error) {
	b, err := readProcLine(pidPath(pid, "stat"))
	if err != nil {
		return "", err
	}
	return statLineField(b, n)
}

// statLineField is field n (n > 2) of a /proc/<pid>/stat line.
func statLineField(b []byte, n int) (string, error) {
	// comm (field 2) may hold spaces and parens: count from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "", os.ErrInvalid
	}
	fields := bytes.Fields(b[i+1:])
	if len(fields) < n-2 {
		return "", os.ErrInvalid
	}
	return string(fields[n-3]), nil
}

// readProc reads a small /proc file with plain system calls: os.Open
// and os.ReadFile try to register the descriptor with the poller (five
// more calls, all wasted on /proc) and fstat it, on every request.
func readProc(path string) ([]byte, error) { return readProcFile(path, false) }

// readProcLine is readProc for a file of one line (/proc/<pid>/stat):
// a read that ends the line has it all (procfs renders the file at the
// first read), which spares the read that would see the end of file.
func readProcLine(path string) ([]byte, error) { return readProcFile(path, true) }

func readProcFile(path string, line bool) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	b := make([]byte, 0, 4096)
	for {
		n, err := unix.Read(fd, b[len(b):cap(b)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return b, nil
		}
		b = b[:len(b)+n]
		if line && b[len(b)-1] == '\n' {
			return b, nil
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
	}
}

// readUpTo reads the first max bytes of a /proc file, with plain calls.
func readUpTo(path string, max int) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	b := make([]byte, 0, 4096)
	for len(b) < max {
		if len(b) == cap(b) {
			b = slices.Grow(b, min(cap(b), max-len(b)))
		}
		n, err := unix.Read(fd, b[len(b):cap(b)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			break
		}
		b = b[:len(b)+n]
	}
	return b, nil
}
