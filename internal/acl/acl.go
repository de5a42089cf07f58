// Package acl reads POSIX ACLs in their extended attribute form and
// decides access from them exactly as the kernel's posix_acl_permission
// does. The kernel enforces ACLs itself; safefs needs this only for an
// open the kernel did not check (fs's mayOpen).
package acl

import (
	"encoding/binary"
	"errors"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
)

// The extended attributes that hold a file's access ACL and a
// directory's default ACL.
const (
	AccessXattr  = "system.posix_acl_access"
	DefaultXattr = "system.posix_acl_default"
)

// ACL entry tags (include/uapi/linux/posix_acl.h).
const (
	UserObj  = 0x01
	User     = 0x02
	GroupObj = 0x04
	Group    = 0x08
	Mask     = 0x10
	Other    = 0x20
)

// Entry is one entry of an ACL: its tag, its rwx bits, and for User and
// Group the id it names.
type Entry struct {
	Tag, Perm uint16
	ID        uint32
}

// Parse reads the xattr form: a u32 version (2), then 8-byte entries.
func Parse(b []byte) ([]Entry, error) {
	if len(b) < 4 || (len(b)-4)%8 != 0 || binary.LittleEndian.Uint32(b) != 2 {
		return nil, errors.New("bad ACL")
	}
	var out []Entry
	for b = b[4:]; len(b) > 0; b = b[8:] {
		out = append(out, Entry{binary.LittleEndian.Uint16(b), binary.LittleEndian.Uint16(b[2:]), binary.LittleEndian.Uint32(b[4:])})
	}
	return out, nil
}

// Allows reports whether the ACL grants the caller (uid, in the groups
// inGroup reports) all of want (rwx bits) on the file of stat st,
// exactly as the kernel's posix_acl_permission decides: the owner's
// entry, else a named user's (masked), else the group class (the first
// matching entry that grants want, masked), else other.
func Allows(acl []Entry, st *unix.Stat_t, uid uint32, inGroup func(gid uint32) bool, want uint16) bool {
	found := false
	for i, e := range acl {
		switch e.Tag {
		case UserObj:
			if uid == st.Uid {
				return e.Perm&want == want
			}
		case User:
			if uid == e.ID {
				return maskedAllows(acl[i+1:], e.Perm, want)
			}
		case GroupObj, Group:
			gid := e.ID
			if e.Tag == GroupObj {
				gid = st.Gid
			}
			if inGroup(gid) {
				found = true
				if e.Perm&want == want {
					return maskedAllows(acl[i+1:], e.Perm, want)
				}
			}
		case Other:
			return !found && e.Perm&want == want
		}
	}
	return false
}

// maskedAllows applies the mask entry that follows (entries are sorted
// by tag), if any.
func maskedAllows(rest []Entry, perm, want uint16) bool {
	for _, e := range rest {
		if e.Tag == Mask {
			return perm&e.Perm&want == want
		}
	}
	return perm&want == want
}

// Access returns the access ACL of the file fd, nil if it has none.
func Access(fd int) []Entry {
	buf := make([]byte, 4096)
	n, err := unix.Getxattr(backing.ProcPath(fd), AccessXattr, buf)
	if err != nil {
		return nil
	}
	acl, err := Parse(buf[:n])
	if err != nil {
		return nil
	}
	return acl
}

// HasDefault reports whether directory dir has a default ACL.
func HasDefault(dir int) bool {
	sz, err := unix.Getxattr(backing.ProcPath(dir), DefaultXattr, nil)
	return err == nil && sz > 0
}
