package proc

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// HoldsOpen reports whether process pid has a descriptor open on the
// file whose inode number is ino through the mount whose ID is mnt:
// /proc/<pid>/fdinfo/N gives both, whatever name or kernel node the
// descriptor came through (with cache=version a file has several, and
// /proc/<pid>/fd shows " (deleted)" after a name's entry was dropped),
// and reading it does not call into the mount.
func HoldsOpen(pid uint32, ino uint64, mnt int) bool {
	if pid == 0 || mnt == 0 {
		return false
	}
	return anyFdinfo(pid, false, func(p string) bool {
		m, i, ok := fdIdentity(p)
		return ok && m == mnt && i == ino
	})
}

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

// HoldsLock reports whether process pid holds a flock, POSIX or OFD
// lock on any file: /proc/<pid>/fdinfo lists the locks each descriptor
// owns. Read only for a learning candidate, never per open, and so
// bounded by SessionWait, not Wait: a JVM's few dozen descriptors
// on a loaded machine took longer than Wait. known is false when
// it could not be told (nothing is learned from this request, and
// nothing is remembered either).
func HoldsLock(pid uint32) (held, known bool) {
	const unknown = -1
	switch sessionBounded(unknown, func() int {
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

// CloseOnExec marks close-on-exec every descriptor of this process that
// /proc/self/fd shows open on target ("/dev/fuse").
func CloseOnExec(target string) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if l, lerr := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && lerr == nil && l == target {
			unix.CloseOnExec(fd)
		}
	}
}
