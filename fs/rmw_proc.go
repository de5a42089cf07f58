package fs

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// What sessions read from /proc: the parent chain (re-entrance for a
// holder's children), the command line (the program learned), and lock
// lines (learning only). Every read is bounded, as in procfs.go.

// rmwProcWait bounds these reads. They are about the caller, which is
// waiting in this very open: longer than procWait, since a read that
// does not come in time on a loaded machine would cost a session (each
// one missed loses up to as many increments as there are waiters).
const rmwProcWait = 2 * time.Second

func rmwBounded[T any](def T, fn func() T) T { return boundedFor(rmwProcWait, def, fn) }

// rmwTgid is the process of thread tid; tid itself if that cannot be
// told (it is the process of a single-threaded program).
func rmwTgid(tid uint32) uint32 {
	s := rmwBounded("", func() string { return readStatus(tid, "Tgid") })
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 0 {
		return tid
	}
	return uint32(n)
}

// maxAncestry bounds the walk up a parent chain.
const maxAncestry = 64

// isFamily reports whether thread tid runs in a descendant process of
// the process of thread holder: a CGI script that forks a child, or a
// shell whose cat opens the file, must not wait for itself. Another
// thread of the holder's own process is not family: it waits, as a
// servlet's request threads must. (A child forked by any thread of the
// holder's process counts: a child's parent is a process, not a thread.)
func isFamily(holder, tid int32) bool {
	return rmwBounded(false, func() bool {
		hp, p := int32(tgidOf(uint32(holder))), int32(tgidOf(uint32(tid)))
		if hp == 0 || p == 0 || p == hp {
			return false
		}
		for range maxAncestry {
			if p <= 1 {
				return false
			}
			pp, err := parentOf(p)
			if err != nil {
				return false
			}
			if pp == hp {
				return true
			}
			p = pp
		}
		return false
	})
}

// parentOf reads field 4 of /proc/<pid>/stat.
func parentOf(pid int32) (int32, error) {
	f, err := statField(uint32(pid), 4)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(f, 10, 32)
	return int32(n), err
}

// args returns the first arguments of pid's command line.
func args(pid uint32) []string {
	if pid == 0 {
		return nil
	}
	return rmwBounded(nil, func() []string { return procArgs(pid) })
}

// program names what pid runs, for learning: the executable the kernel
// runs it from (/proc/PID/exe, which argv cannot change: a process that
// set $0 or was started with exec -a is still what it executes) and its
// first argument after argv[0] that is not an option (an interpreter's
// script), so that a CGI counter is one program whatever its query and
// two Perl scripts are two programs. That argument is argv's: a process
// can name any script there, but only its own user's pairs ever select
// it (Pair.UID), and what it could do to its own user's sessions that
// way it can do anyway (signal, stop or trace that user's processes,
// rewrite the files). It is not resolved: a stat of a path the caller
// chose, from within its request, could reach this very mount while
// the kernel holds the directory's lock (a CREATE learns too). "": the
// executable could not be read (gone, another pid namespace).
func program(pid uint32) string {
	if pid == 0 {
		return ""
	}
	return rmwBounded("", func() string {
		exe, err := os.Readlink(pidPath(pid, "exe"))
		if err != nil || exe == "" {
			return ""
		}
		a := procArgs(pid)
		for i, x := range a {
			if i > 0 && x != "" && !strings.HasPrefix(x, "-") {
				return exe + " " + x
			}
		}
		return exe
	})
}

// cmdline is pid's command line for a log line, shortened.
func cmdline(pid uint32) string {
	s := strings.Join(args(pid), " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// holdsLock reports whether process pid holds a flock, POSIX or OFD
// lock on any file: /proc/<pid>/fdinfo lists the locks each descriptor
// owns. Read only for a learning candidate, never per open, and so
// bounded by rmwProcWait, not procWait: a JVM's few dozen descriptors
// on a loaded machine took longer than procWait. known is false when
// it could not be told (nothing is learned from this request, and
// nothing is remembered either).
func holdsLock(pid uint32) (held, known bool) {
	const unknown = -1
	switch rmwBounded(unknown, func() int {
		dir := pidPath(pid, "fdinfo")
		ents, err := os.ReadDir(dir)
		if err != nil {
			return unknown
		}
		for _, e := range ents {
			if fdHoldsLock(dir + "/" + e.Name()) {
				return 1
			}
		}
		return 0
	}) {
	case 0:
		return false, true
	case 1:
		return true, true
	}
	return true, false
}

func fdHoldsLock(p string) bool {
	b, err := readProc(p) // plain calls: os.Open would try the poller
	if err != nil {
		return false // closed meanwhile
	}
	for _, l := range strings.Split(string(b), "\n") {
		// "lock:\t1: FLOCK  ADVISORY  WRITE 123 00:2f:5 0 EOF"; a
		// request still waiting ("->") is not held.
		if rest, ok := strings.CutPrefix(l, "lock:"); ok && !strings.Contains(rest, "->") {
			return true
		}
	}
	return false
}

// environMax bounds what is read of a process's environment: a CGI
// request's is a few KiB.
const environMax = 64 << 10

// requestFeatures tell the request class of process pid: a CGI
// request's method and the sorted names of its query's parameters
// ("GET", "POST", "GET ?mode&page"), from the environment its web
// server gave it (/proc/PID/environ, as it was at exec; root may read
// it). Values are never kept: a query's values would make each request
// a class of its own, and may be private. "": no REQUEST_METHOD (not a
// CGI request, or unreadable): all such requests of a program are one
// class. Like the script argument, the environment is the process's to
// choose, and reaches only its own user's classes.
func requestFeatures(pid uint32) string {
	if pid == 0 {
		return ""
	}
	return rmwBounded("", func() string {
		b, err := readUpTo(pidPath(pid, "environ"), environMax)
		if err != nil {
			return ""
		}
		var method, query string
		for _, kv := range strings.Split(string(b), "\x00") {
			if v, ok := strings.CutPrefix(kv, "REQUEST_METHOD="); ok {
				method = v
			} else if v, ok := strings.CutPrefix(kv, "QUERY_STRING="); ok {
				query = v
			}
		}
		return classOf(method, query)
	})
}

// maxQueryNames bounds the parameter names a class is told by; each is
// cut to maxQueryName bytes.
const maxQueryNames, maxQueryName = 8, 32

// classOf is the class of a request by its method and query string.
func classOf(method, query string) string {
	if method == "" || len(method) > 16 {
		return ""
	}
	var names []string
	for _, kv := range strings.FieldsFunc(query, func(r rune) bool { return r == '&' || r == ';' }) {
		nm, _, _ := strings.Cut(kv, "=")
		if nm == "" {
			continue
		}
		if len(nm) > maxQueryName {
			nm = nm[:maxQueryName]
		}
		if !slices.Contains(names, nm) {
			names = append(names, nm)
		}
	}
	slices.Sort(names)
	if len(names) > maxQueryNames {
		names = append(names[:maxQueryNames], "...")
	}
	if len(names) == 0 {
		return method
	}
	return method + " ?" + strings.Join(names, "&")
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
