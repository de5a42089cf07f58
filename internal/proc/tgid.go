package proc

import (
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Tgid returns the process (thread group) of thread pid: FUSE sends
// the calling thread's id. 0 when it cannot be told. A thread met before
// is answered from threadGroups once the kernel confirms it is still in
// that group (one call); a leader in one call too.
func Tgid(pid uint32) uint32 { return tgidWithin(pid, Wait) }

// TgidOrSelf is the process of thread tid; tid itself if that cannot be
// told (it is the process of a single-threaded program). As Tgid, with
// a read of /proc bounded by SessionWait.
func TgidOrSelf(tid uint32) uint32 {
	if tgid := tgidWithin(tid, SessionWait); tgid != 0 {
		return tgid
	}
	return tid
}

// tgidWithin is Tgid with a read of /proc/<pid>/status bounded by wait
// (the one implementation of both).
func tgidWithin(pid uint32, wait time.Duration) uint32 {
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
		n, err := strconv.ParseUint(statusWithin(wait, pid, "Tgid"), 10, 32)
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
// Program (a Go program, a threaded server) is answered here.
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

// threadGroups remembers the process of the threads of multi-threaded
// callers (a threaded web server, a Go program), which only a pidfd or
// /proc can tell. Entries are checked at each use (threadOf), so the
// table only saves calls; it is cleared when full rather than aged.
var threadGroups = threadTable{max: 4096}

type threadTable struct {
	mu   sync.Mutex
	max  int
	tgid map[uint32]uint32
}

func (t *threadTable) get(tid uint32) (uint32, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tgid, ok := t.tgid[tid]
	return tgid, ok
}

func (t *threadTable) put(tid, tgid uint32) {
	if tgid == 0 || tgid == tid {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tgid == nil || len(t.tgid) >= t.max {
		t.tgid = make(map[uint32]uint32)
	}
	t.tgid[tid] = tgid
}

// Parent returns the parent process of thread tid (of its process), 0
// when it cannot be told: through a pidfd (three calls that never wait),
// else /proc/<pid>/stat, bounded by SessionWait.
func Parent(tid uint32) uint32 {
	if tid == 0 {
		return 0
	}
	if fd, err := unix.PidfdOpen(int(tid), unix.PIDFD_THREAD); err == nil {
		info := unix.PidfdInfo{Mask: unix.PIDFD_INFO_PID}
		err := unix.IoctlPidfdInfo(fd, &info)
		unix.Close(fd)
		if err == nil && info.Tgid != 0 {
			return info.Ppid
		}
	}
	return sessionBounded(0, func() uint32 {
		pp, err := parentOf(int32(tid))
		if err != nil || pp < 0 {
			return 0
		}
		return uint32(pp)
	})
}

// SingleThreaded reports whether process pid runs one thread (field 20
// of /proc/<pid>/stat): only such a process is taken for one request
// whose children open files in its name.
func SingleThreaded(pid uint32) bool {
	if pid == 0 {
		return false
	}
	return sessionBounded(false, func() bool {
		f, err := statField(pid, 20)
		return err == nil && f == "1"
	})
}
