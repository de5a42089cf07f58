package fs

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// mayOpen checks that the caller may open an existing file with flags,
// from its mode bits, as the kernel's may_open does. The kernel skips
// its own check when it believes an O_CREAT open made the file, so an
// open that found the file there already (put there directly in BACKING
// between the kernel's lookup and the create) must be checked here.
// ACLs are not consulted: such an open is refused unless the mode bits
// allow it.
func mayOpen(ctx context.Context, st *unix.Stat_t, flags uint32) error {
	c, ok := fuse.FromContext(ctx)
	if !ok || c.Uid == 0 {
		return nil
	}
	var want uint32
	if flags&syscall.O_ACCMODE != syscall.O_WRONLY {
		want |= 4
	}
	if isWrite(flags) || flags&syscall.O_TRUNC != 0 {
		want |= 2
	}
	perm := st.Mode & 7
	switch {
	case c.Uid == st.Uid:
		perm = st.Mode >> 6 & 7
	case inGroup(c, st.Gid):
		perm = st.Mode >> 3 & 7
	}
	if perm&want != want {
		return syscall.EACCES
	}
	return nil
}

// inGroup reports whether the caller has gid as its group or one of its
// supplementary groups (read from /proc: FUSE sends only the primary).
func inGroup(c *fuse.Caller, gid uint32) bool {
	if c.Gid == gid {
		return true
	}
	for _, g := range strings.Fields(procStatus(c.Pid&^noFh, "Groups")) {
		if n, err := strconv.ParseUint(g, 10, 32); err == nil && uint32(n) == gid {
			return true
		}
	}
	return false
}

// tgidOf returns the process (thread group) of thread pid: FUSE sends
// the calling thread's id. 0 when it cannot be told.
func tgidOf(pid uint32) uint32 {
	n, err := strconv.ParseUint(procStatus(pid, "Tgid"), 10, 32)
	if err != nil {
		return 0
	}
	return uint32(n)
}

// procStatus returns one field of /proc/<pid>/status, "" if unknown.
// The read is bounded: /proc blocks while the process is in execve,
// which may itself be waiting for the request being served.
func procStatus(pid uint32, field string) string {
	if pid == 0 {
		return ""
	}
	ch := make(chan string, 1)
	go func() { ch <- readStatus(pid, field) }()
	select {
	case v := <-ch:
		return v
	case <-time.After(100 * time.Millisecond):
		return ""
	}
}

func readStatus(pid uint32, field string) string {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}
