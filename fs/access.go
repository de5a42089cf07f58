package fs

import (
	"context"
	"strconv"
	"strings"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/acl"
	"github.com/safefs/safefs/internal/proc"
)

// POSIX ACLs are enforced by the kernel (CAP_POSIX_ACL): it reads them
// through getxattr. safefs's own part is to create entries as the
// backing file system would for the caller, and to check an open the
// kernel did not check (mayOpen).

// createMode is the mode to create an entry with in directory dir, from
// the caller's mode and umask (see splitUmask). As on a local file
// system, a default ACL on the directory replaces the umask: the backing
// file system applies it (the daemon's own umask is 0).
func createMode(dir int, mode uint32) uint32 {
	mode, umask := splitUmask(mode)
	if umask == 0 || acl.HasDefault(dir) {
		return mode
	}
	return mode &^ umask
}

// mayOpen checks that the caller may open the existing file fd (stat
// st) with flags, as the kernel's may_open does: from its access ACL if
// it has one, else from its mode bits. The kernel skips its own check
// when it believes an O_CREAT open made the file, so an open that found
// the file there already (put there directly in BACKING between the
// kernel's lookup and the create) must be checked here.
func mayOpen(ctx context.Context, fd int, st *unix.Stat_t, flags uint32) error {
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
	if a := acl.Access(fd); a != nil {
		if !acl.Allows(a, st, c.Uid, func(gid uint32) bool { return inGroup(c, gid) }, uint16(want)) {
			return syscall.EACCES
		}
		return nil
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
	for _, g := range strings.Fields(proc.Status(c.Pid&^noFh, "Groups")) {
		if n, err := strconv.ParseUint(g, 10, 32); err == nil && uint32(n) == gid {
			return true
		}
	}
	return false
}

// capSysAdmin is CAP_SYS_ADMIN's bit (include/uapi/linux/capability.h).
const capSysAdmin = 21

// callerHasCap reports whether the caller's thread has capability bit
// in its effective set (CapEff in /proc/<tid>/status).
func callerHasCap(ctx context.Context, bit uint) bool {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return false
	}
	eff, err := strconv.ParseUint(proc.Status(c.Pid&^noFh, "CapEff"), 16, 64)
	return err == nil && eff&(1<<bit) != 0
}
