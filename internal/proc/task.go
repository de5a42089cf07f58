package proc

import (
	"errors"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Linux task flags (include/linux/sched.h).
const (
	pfExiting  = 0x4
	pfSignaled = 0x400
)

// KilledBySignal reports whether pid is exiting because a signal killed
// it. A dying process still flushes its descriptors; its writes must not
// commit. pid 0 (another pid namespace) cannot be checked; a process in
// execve is not dying.
func KilledBySignal(pid uint32) bool {
	if pid == 0 || hasFiles(pid) {
		return false
	}
	fl := bounded(0, func() uint64 { fl, _ := taskFlags(pid); return fl })
	return fl&pfExiting != 0 && fl&pfSignaled != 0
}

// hasFiles reports whether thread pid still has its descriptor table,
// so is not dying: an exiting task drops it before it closes its files
// (exit_files). The size of /proc/<pid>/fd counts the open descriptors
// of that table, 0 without one (Linux 6.2; always 0 before, which tells
// nothing). One statx, which never waits, where a read of
// /proc/<pid>/stat waits while pid is in execve and so must be bounded
// by a goroutine and a timer: 3 against 23 µs here. (statx, not the
// commit's own newfstatat, which the fault tests aim at.)
func hasFiles(pid uint32) bool {
	var st unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, pidPath(pid, "fd"), 0, unix.STATX_SIZE, &st)
	return err == nil && st.Size > 0
}

// taskFlags reads field 9 of /proc/<pid>/stat.
func taskFlags(pid uint32) (uint64, error) {
	f, err := statField(pid, 9)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(f, 10, 64)
}

// maxAncestry bounds the walk up a parent chain.
const maxAncestry = 64

// IsFamily reports whether thread tid runs in a descendant process of
// the process of thread holder: a CGI script that forks a child, or a
// shell whose cat opens the file, must not wait for itself. Another
// thread of the holder's own process is not family: it waits, as a
// servlet's request threads must. (A child forked by any thread of the
// holder's process counts: a child's parent is a process, not a thread.)
func IsFamily(holder, tid int32) bool {
	return sessionBounded(false, func() bool {
		hp, p := int32(Tgid(uint32(holder))), int32(Tgid(uint32(tid)))
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

// Descendants lists the processes below pid (through every thread's
// children), at most limit; all is false when there were more or a list
// could not be read.
func Descendants(pid uint32, limit int) (kids []uint32, all bool) {
	todo := []uint32{pid}
	for len(todo) > 0 {
		p := todo[0]
		todo = todo[1:]
		tasks, err := os.ReadDir(pidPath(p, "task"))
		if err != nil && p != pid && errors.Is(err, os.ErrNotExist) {
			continue // ended meanwhile: holds nothing
		}
		if err != nil {
			return kids, false
		}
		for _, t := range tasks {
			task := pidPath(p, "task/"+t.Name())
			b, err := readProcFile(task+"/children", false)
			if err != nil {
				if _, serr := os.Stat(task); serr == nil {
					return kids, false // the thread lives: no children file (CONFIG_PROC_CHILDREN)
				}
				continue // the thread ended
			}
			for _, w := range strings.Fields(string(b)) {
				k, err := strconv.ParseUint(w, 10, 32)
				if err != nil {
					return kids, false
				}
				if len(kids) == limit {
					return kids, false
				}
				kids = append(kids, uint32(k))
				todo = append(todo, uint32(k))
			}
		}
	}
	return kids, true
}
