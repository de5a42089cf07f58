package fs

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/mountinfo"
)

// What the daemon learns about a caller comes from /proc. Reading /proc
// of a process blocks while it is in execve, and execve may itself wait
// for the very request being served (it closes inherited descriptors):
// every read is bounded, and an answer that does not come is def.
const procWait = 100 * time.Millisecond

func bounded[T any](def T, fn func() T) T { return boundedFor(procWait, def, fn) }

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

// pidPath is /proc/<pid>/name.
func pidPath(pid uint32, name string) string {
	return "/proc/" + strconv.FormatUint(uint64(pid), 10) + "/" + name
}

// Linux task flags (include/linux/sched.h).
const (
	pfExiting  = 0x4
	pfSignaled = 0x400
)

// killedBySignal reports whether pid is exiting because a signal killed
// it. A dying process still flushes its descriptors; its writes must not
// commit. pid 0 (another pid namespace) cannot be checked; a process in
// execve is not dying.
func killedBySignal(pid uint32) bool {
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

// statField returns field n (from 1, as proc(5) counts) of
// /proc/<pid>/stat, for n past the command name (field 2).
func statField(pid uint32, n int) (string, error) {
	b, err := readProcLine(pidPath(pid, "stat"))
	if err != nil {
		return "", err
	}
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

// tgidOf returns the process (thread group) of thread pid: FUSE sends
// the calling thread's id. 0 when it cannot be told. A thread met before
// is answered from threadGroups once the kernel confirms it is still in
// that group (one call); a leader in one call too.
func tgidOf(pid uint32) uint32 {
	if pid == 0 {
		return 0
	}
	if tgid, ok := threadGroups.get(pid); ok && threadOf(tgid, pid) {
		return tgid
	}
	if isLeader(pid) {
		return pid
	}
	tgid, ok := pidfdTgid(pid)
	if !ok {
		n, err := strconv.ParseUint(procStatus(pid, "Tgid"), 10, 32)
		if err != nil {
			return 0
		}
		tgid = uint32(n)
	}
	threadGroups.put(pid, tgid)
	return tgid
}

// isLeader reports whether pid leads its thread group (tgid == pid),
// the common case of a single-threaded script.
func isLeader(pid uint32) bool { return threadOf(pid, pid) }

// threadOf reports whether thread tid is now a thread of process tgid:
// tgkill with signal 0 sends nothing and checks just that (EPERM: it
// is, but the daemon may not signal it). One call that never waits and
// makes no file, where a pidfd costs three. A tid reused by another
// process fails it, so a remembered answer is never stale.
func threadOf(tgid, tid uint32) bool {
	err := unix.Tgkill(int(tgid), int(tid), 0)
	return err == nil || err == unix.EPERM
}

// pidfdTgid asks the kernel for the process of thread pid through a
// pidfd of the thread (PIDFD_THREAD, Linux 6.9; PIDFD_GET_INFO, 6.13):
// three calls that never wait, where reading /proc/<pid>/status must be
// bounded by a goroutine and a timer. A thread of a multi-threaded
// program (a Go program, a threaded server) is answered here.
func pidfdTgid(pid uint32) (uint32, bool) {
	fd, err := unix.PidfdOpen(int(pid), unix.PIDFD_THREAD)
	if err != nil {
		return 0, false
	}
	defer unix.Close(fd)
	info := unix.PidfdInfo{Mask: unix.PIDFD_INFO_PID}
	if err := unix.IoctlPidfdInfo(fd, &info); err != nil || info.Tgid == 0 {
		return 0, false
	}
	return info.Tgid, true
}

// procStatus returns one field of /proc/<pid>/status, "" if unknown.
func procStatus(pid uint32, field string) string {
	if pid == 0 {
		return ""
	}
	return bounded("", func() string { return readStatus(pid, field) })
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

// holdsOpen reports whether process pid has a descriptor open on the
// file whose inode number is ino through the mount whose ID is mnt:
// /proc/<pid>/fdinfo/N gives both, whatever name or kernel node the
// descriptor came through (with cache=version a file has several, and
// /proc/<pid>/fd shows " (deleted)" after a name's entry was dropped),
// and reading it does not call into the mount.
func holdsOpen(pid uint32, ino uint64, mnt int) bool {
	if pid == 0 || mnt == 0 {
		return false
	}
	return anyFdinfo(pid, false, func(p string) bool {
		m, i, ok := fdIdentity(p)
		return ok && m == mnt && i == ino
	})
}

// descendants lists the processes below pid (through every thread's
// children), at most limit; all is false when there were more or a list
// could not be read.
func descendants(pid uint32, limit int) (kids []uint32, all bool) {
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

// maxDescendants bounds the processes ptLast looks at; beyond, a copy is
// committed.
const maxDescendants = 64

// anyFdinfo reports whether is holds for the /proc/<pid>/fdinfo file
// of one of process pid's descriptors; def if they cannot be listed, or
// not in time (bounded).
func anyFdinfo(pid uint32, def bool, is func(fdinfo string) bool) bool {
	return bounded(def, func() bool {
		dir := pidPath(pid, "fdinfo")
		ents, err := os.ReadDir(dir)
		if err != nil {
			return def
		}
		for _, e := range ents {
			if is(dir + "/" + e.Name()) {
				return true
			}
		}
		return false
	})
}

// fdIdentity reads the mount ID and inode number of a descriptor from
// its fdinfo file.
func fdIdentity(p string) (mnt int, ino uint64, ok bool) {
	b, err := readProc(p)
	if err != nil {
		return 0, 0, false // closed meanwhile
	}
	var seen int
	for _, l := range strings.SplitN(string(b), "\n", 6) {
		k, v, _ := strings.Cut(l, ":")
		v = strings.TrimSpace(v)
		switch k {
		case "mnt_id":
			mnt, err = strconv.Atoi(v)
		case "ino":
			ino, err = strconv.ParseUint(v, 10, 64)
		default:
			continue
		}
		if err != nil {
			return 0, 0, false
		}
		seen++
	}
	return mnt, ino, seen == 2
}

func (r *root) mountID() int { return int(r.mntID.Load()) }

// SafefsMount finds the safefs mount at mountpoint in
// /proc/self/mountinfo: its mount ID and its source (BACKING).
func SafefsMount(mountpoint string) (id int, source string, found bool) {
	return mountinfo.Find(mountpoint, "fuse."+mountName)
}
