package fs

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
	"github.com/safefs/safefs/internal/xattr"
)

// keptMode is the mode a commit gives the new version: the old mode,
// without set-uid (and set-gid on group-executables) when a non-root
// writer changed the content, as the kernel does for a plain write.
func (h *handle) keptMode(mode uint32) uint32 {
	mode &= 07777
	if h.uid == 0 {
		return mode
	}
	mode &^= unix.S_ISUID
	if mode&unix.S_IXGRP != 0 {
		mode &^= unix.S_ISGID
	}
	return mode
}

// carryMeta gives the staging file the owner, group, mode and extended
// attributes (ACLs among them) of the version it replaces.
func (h *handle) carryMeta(v named) error {
	old := &v.st
	fd := int(h.p.stage.Fd())
	if err := unix.Fchown(fd, int(old.Uid), int(old.Gid)); err != nil && !errors.Is(err, unix.EPERM) {
		return err
	}
	// After chown, which clears set-id bits.
	mode := h.keptMode(old.Mode)
	h.modeDropped = mode != old.Mode&07777
	if err := unix.Fchmod(fd, mode); err != nil {
		return err
	}
	return xattr.Copy(backing.ProcPath(v.fd), fd, h.uid == 0)
}
