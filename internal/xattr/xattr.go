// Package xattr lists, reads and copies extended attributes of a file
// named by path (a /proc/self/fd path: exactly one inode).
package xattr

import (
	"bytes"
	"errors"

	"golang.org/x/sys/unix"
)

// Copy copies every extended attribute of the file at path onto
// fd. security.capability is dropped for non-root writers.
func Copy(path string, fd int, root bool) error {
	names, err := List(path)
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
		v, err := Get(path, a)
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

// List lists the names of the extended attributes of the file at path.
func List(path string) ([]string, error) {
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

// Get reads extended attribute attr of the file at path.
func Get(path, attr string) ([]byte, error) {
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
