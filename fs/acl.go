package fs

import (
	"encoding/binary"
	"errors"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
)

// POSIX ACLs are enforced by the kernel (CAP_POSIX_ACL): it reads them
// through getxattr. safefs's own part is to create entries as the
// backing file system would for the caller, and to check an open the
// kernel did not check (mayOpen).

const (
	aclAccess  = "system.posix_acl_access"
	aclDefault = "system.posix_acl_default"
)

// createMode is the mode to create an entry with in directory dir, from
// the caller's mode and umask (see splitUmask). As on a local file
// system, a default ACL on the directory replaces the umask: the backing
// file system applies it (the daemon's own umask is 0).
func createMode(dir int, mode uint32) uint32 {
	mode, umask := splitUmask(mode)
	if umask == 0 || hasXattr(dir, aclDefault) {
		return mode
	}
	return mode &^ umask
}

func hasXattr(fd int, name string) bool {
	sz, err := unix.Getxattr(backing.ProcPath(fd), name, nil)
	return err == nil && sz > 0
}

// ACL entry tags (include/uapi/linux/posix_acl.h).
const (
	aclUserObj  = 0x01
	aclUser     = 0x02
	aclGroupObj = 0x04
	aclGroup    = 0x08
	aclMask     = 0x10
	aclOther    = 0x20
)

type aclEntry struct {
	tag, perm uint16
	id        uint32
}

// parseACL reads the xattr form: a u32 version (2), then 8-byte entries.
func parseACL(b []byte) ([]aclEntry, error) {
	if len(b) < 4 || (len(b)-4)%8 != 0 || binary.LittleEndian.Uint32(b) != 2 {
		return nil, errors.New("bad ACL")
	}
	var out []aclEntry
	for b = b[4:]; len(b) > 0; b = b[8:] {
		out = append(out, aclEntry{binary.LittleEndian.Uint16(b), binary.LittleEndian.Uint16(b[2:]), binary.LittleEndian.Uint32(b[4:])})
	}
	return out, nil
}

// aclAllows reports whether the ACL grants the caller all of want (rwx
// bits), exactly as the kernel's posix_acl_permission decides: the
// owner's entry, else a named user's (masked), else the group class (the
// first matching entry that grants want, masked), else other.
func aclAllows(acl []aclEntry, st *unix.Stat_t, c *fuse.Caller, want uint16) bool {
	found := false
	for i, e := range acl {
		switch e.tag {
		case aclUserObj:
			if c.Uid == st.Uid {
				return e.perm&want == want
			}
		case aclUser:
			if c.Uid == e.id {
				return maskedAllows(acl[i+1:], e.perm, want)
			}
		case aclGroupObj, aclGroup:
			gid := e.id
			if e.tag == aclGroupObj {
				gid = st.Gid
			}
			if inGroup(c, gid) {
				found = true
				if e.perm&want == want {
					return maskedAllows(acl[i+1:], e.perm, want)
				}
			}
		case aclOther:
			return !found && e.perm&want == want
		}
	}
	return false
}

// maskedAllows applies the mask entry that follows (entries are sorted
// by tag), if any.
func maskedAllows(rest []aclEntry, perm, want uint16) bool {
	for _, e := range rest {
		if e.tag == aclMask {
			return perm&e.perm&want == want
		}
	}
	return perm&want == want
}

// accessACL returns the access ACL of the file fd, nil if it has none.
func accessACL(fd int) []aclEntry {
	buf := make([]byte, 4096)
	n, err := unix.Getxattr(backing.ProcPath(fd), aclAccess, buf)
	if err != nil {
		return nil
	}
	acl, err := parseACL(buf[:n])
	if err != nil {
		return nil
	}
	return acl
}
