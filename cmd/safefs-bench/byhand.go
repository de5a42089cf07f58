package main

import (
	"path/filepath"

	"golang.org/x/sys/unix"
)

// byHandTarget is the plain directory written the way a careful program
// makes a durable atomic write without safefs (the anchor for
// durability=full): write a temporary file, fsync it, rename it over the
// name, fsync the directory. An append is a write and fdatasync: by hand
// there is no atomic append, only a durable one.
const byHandTarget = "byhand"

// byHandFUSETarget is the same careful program through go-fuse's example
// loopback: what doing it right by hand costs on a plain FUSE mount, the
// fair anchor for safefs's durable commits (which pay FUSE's round trips
// too).
const byHandFUSETarget = "byhand-loopback"

// commit is one commit of data to name in the workload's directory:
// open with flags, write, close; on the by-hand target the durable way.
func (e *env) commit(name string, flags int, data []byte) error {
	p := e.path(name)
	if !e.byHand {
		return writeFile(p, flags, data)
	}
	if flags&unix.O_APPEND != 0 {
		return appendDurably(p, data)
	}
	return replaceDurably(p, flags&unix.O_EXCL != 0, data)
}

func appendDurably(path string, data []byte) error {
	fd, err := retry(func() (int, error) {
		return unix.Open(path, unix.O_WRONLY|unix.O_APPEND|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return err
	}
	err = writeAll(fd, data)
	if err == nil {
		err = unix.Fdatasync(fd)
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	return err
}

// replaceDurably writes path's new content as a temporary file and
// renames it over path; excl (a create) refuses an existing path.
func replaceDurably(path string, excl bool, data []byte) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	fd, err := retry(func() (int, error) {
		return unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o644)
	})
	if err != nil {
		return err
	}
	err = writeAll(fd, data)
	if err == nil {
		err = unix.Fsync(fd)
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err == nil {
		flags := uint(0)
		if excl {
			flags = unix.RENAME_NOREPLACE
		}
		err = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, path, flags)
	}
	if err != nil {
		_ = unix.Unlink(tmp)
		return err
	}
	return fsyncDir(filepath.Dir(path))
}

func fsyncDir(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	err = unix.Fsync(fd)
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	return err
}

// syncFS writes back the file system holding dir (syncfs), not every
// file system as sync() does: a hung FUSE mount elsewhere on the machine
// would hang the bench.
func syncFS(dir string) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	_ = unix.Syncfs(fd)
	unix.Close(fd)
}
