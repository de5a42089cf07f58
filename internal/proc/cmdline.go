package proc

import (
	"bytes"
	"os"
	"slices"
	"strings"
)

// cmdlineMax bounds what is read of a command line.
const cmdlineMax = 4096

// procArgs returns pid's command line (its first cmdlineMax bytes), nil
// when it cannot be read or is empty. Callers bound the read.
func procArgs(pid uint32) []string {
	b, err := readProc(pidPath(pid, "cmdline"))
	if err != nil {
		return nil
	}
	b = bytes.TrimRight(b[:min(len(b), cmdlineMax)], "\x00")
	if len(b) == 0 {
		return nil
	}
	return strings.Split(string(b), "\x00")
}

// Cmdline returns pid's command line, arguments joined by spaces; ""
// when it cannot be read.
func Cmdline(pid uint32) string {
	if pid == 0 {
		return ""
	}
	return bounded("", func() string {
		if a := procArgs(pid); a != nil {
			return strings.Join(a, " ")
		}
		// A dying process (a killed writer's close) has no
		// memory left to read it from: its name, as ps.
		comm, err := readProc(pidPath(pid, "comm"))
		if err != nil {
			return ""
		}
		return "[" + string(bytes.TrimSpace(comm)) + "]"
	})
}

// args returns the first arguments of pid's command line.
func args(pid uint32) []string {
	if pid == 0 {
		return nil
	}
	return sessionBounded(nil, func() []string { return procArgs(pid) })
}

// ShortCmdline is pid's command line for a log line, shortened.
func ShortCmdline(pid uint32) string {
	s := strings.Join(args(pid), " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// Program names what pid runs, for learning: the executable the kernel
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
func Program(pid uint32) string {
	if pid == 0 {
		return ""
	}
	return sessionBounded("", func() string {
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

// environMax bounds what is read of a process's environment: a CGI
// request's is a few KiB.
const environMax = 64 << 10

// RequestFeatures tell the request class of process pid: a CGI
// request's method and the sorted names of its query's parameters
// ("GET", "POST", "GET ?mode&page"), from the environment its web
// server gave it (/proc/PID/environ, as it was at exec; root may read
// it). Values are never kept: a query's values would make each request
// a class of its own, and may be private. "": no REQUEST_METHOD (not a
// CGI request, or unreadable): all such requests of a program are one
// class. Like the script argument, the environment is the process's to
// choose, and reaches only its own user's classes.
func RequestFeatures(pid uint32) string {
	if pid == 0 {
		return ""
	}
	return sessionBounded("", func() string {
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
