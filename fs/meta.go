package fs

import (
	"bytes"
	"errors"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
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
	fd := int(h.stage.Fd())
	if err := unix.Fchown(fd, int(old.Uid), int(old.Gid)); err != nil && !errors.Is(err, unix.EPERM) {
		return err
	}
	// After chown, which clears set-id bits.
	mode := h.keptMode(old.Mode)
	h.modeDropped = mode != old.Mode&07777
	if err := unix.Fchmod(fd, mode); err != nil {
		return err
	}
	return copyXattrs(backing.ProcPath(v.fd), fd, h.uid == 0)
}

// copyXattrs copies every extended attribute of the file at path onto
// fd. security.capability is dropped for non-root writers.
func copyXattrs(path string, fd int, root bool) error {
	names, err := listXattr(path)
	if err != nil {
		if errors.Is(err, unix.ENOTSUP) {
			return nil
		}
		return err
	}
	for _, a := range names {
		if a == "security.capability" && !root {
			continue
		}
		v, err := getXattr(path, a)
		if err != nil {
			if errors.Is(err, unix.ENODATA) {
				continue
			}
			return err
		}
		if err := unix.Fsetxattr(fd, a, v, 0); err != nil && !errors.Is(err, unix.ENOTSUP) {
			return err
		}
	}
	return nil
}

func listXattr(path string) ([]string, error) {
	sz, err := unix.Listxattr(path, nil)
	if err != nil || sz == 0 {
		return nil, err
	}
	buf := make([]byte, sz)
	sz, err = unix.Listxattr(path, buf)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, b := range bytes.Split(buf[:sz], []byte{0}) {
		if len(b) > 0 {
			out = append(out, string(b))
		}
	}
	return out, nil
}

func getXattr(path, attr string) ([]byte, error) {
	sz, err := unix.Getxattr(path, attr, nil)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, sz)
	sz, err = unix.Getxattr(path, attr, buf)
	if err != nil {
		return nil, err
	}
	return buf[:sz], nil
}
