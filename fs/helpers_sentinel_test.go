package fs_test

// The sentinel: a directory outside BACKING whose every byte, mode,
// owner, time and name is compared before and after an attack.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// advEntry is everything observable about one entry of a sentinel tree.
type advEntry struct {
	Mode       uint32
	Uid, Gid   uint32
	Size       int64
	Nlink      uint64
	Ino        uint64
	Atime      unix.Timespec // reads of files and listings of directories move it (see advSentinel)
	Mtime      unix.Timespec
	Ctime      unix.Timespec // chmod, chown, link, rename, write all move it
	Link       string        // symlink target
	Sum        string        // sha256 of regular file contents
	Xattrs     string
	Dents      string // directory entries, sorted
	Unreadable string // why Sum/Dents could not be taken
}

// advSnapshot walks root without following symlinks and without touching
// atimes (O_NOATIME: we are root, so allowed), and describes every entry.
func advSnapshot(t testing.TB, root string) map[string]advEntry {
	t.Helper()
	out := map[string]advEntry{}
	var walk func(rel string)
	walk = func(rel string) {
		p := filepath.Join(root, rel)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Fatalf("snapshot lstat %s: %v", p, err)
		}
		e := advEntry{Mode: st.Mode, Uid: st.Uid, Gid: st.Gid, Size: st.Size, Nlink: uint64(st.Nlink), Ino: st.Ino,
			Atime: st.Atim, Mtime: st.Mtim, Ctime: st.Ctim}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			l, err := os.Readlink(p)
			if err != nil {
				t.Fatalf("snapshot readlink %s: %v", p, err)
			}
			e.Link = l
			e.Atime = unix.Timespec{} // our own readlink moves a symlink's atime
		case unix.S_IFREG:
			fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOATIME|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
			if err != nil {
				e.Unreadable = err.Error()
				break
			}
			f := os.NewFile(uintptr(fd), p)
			h := sha256.New()
			buf := make([]byte, 64<<10)
			for {
				n, err := f.Read(buf)
				h.Write(buf[:n])
				if err != nil {
					break
				}
			}
			f.Close()
			e.Sum = hex.EncodeToString(h.Sum(nil))
		case unix.S_IFDIR:
			fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOATIME|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				e.Unreadable = err.Error()
				break
			}
			f := os.NewFile(uintptr(fd), p)
			names, err := f.Readdirnames(-1)
			f.Close()
			if err != nil {
				e.Unreadable = err.Error()
				break
			}
			sort.Strings(names)
			e.Dents = strings.Join(names, "\x00")
			defer func() {
				for _, n := range names {
					walk(filepath.Join(rel, n))
				}
			}()
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK {
			if sz, err := unix.Llistxattr(p, nil); err == nil && sz > 0 {
				buf := make([]byte, sz)
				if sz, err = unix.Llistxattr(p, buf); err == nil {
					e.Xattrs = string(buf[:sz])
				}
			}
		}
		out[rel] = e
	}
	walk(".")
	return out
}

// advSameTree fails the test for every difference between two snapshots.
func advSameTree(t testing.TB, what string, before, after map[string]advEntry) {
	t.Helper()
	for k, b := range before {
		a, ok := after[k]
		if !ok {
			t.Errorf("%s: %s disappeared", what, k)
			continue
		}
		if a != b {
			t.Errorf("%s: %s changed:\n before %+v\n after  %+v", what, k, b, a)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			t.Errorf("%s: %s appeared", what, k)
		}
	}
}

// advSentinel makes a directory outside every BACKING of the test, with
// files, a subdirectory, a symlink and a FIFO, every atime set far
// before its mtime so that (relatime or not) any read of a file or
// listing of a directory moves it. The directory is root's and 0700, so
// that another user's own path resolution cannot reach it: whatever
// changes in it was done by the daemon (root).
func advSentinel(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "sentinel")
	must(t, os.Mkdir(dir, 0o700))
	must(t, os.Chmod(dir, 0o700))
	must(t, os.WriteFile(filepath.Join(dir, "x"), []byte("sentinel x\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "passwd"), []byte("root:x:0:0::/root:/bin/sh\n"), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "f"), bytes.Repeat([]byte("S"), 10000), 0o666))
	must(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "sub", "y"), []byte("sentinel y\n"), 0o640))
	must(t, os.Symlink("x", filepath.Join(dir, "lnk")))
	must(t, unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600))
	for _, p := range []string{"x", "passwd", "f", "sub/y", "sub", "fifo", "."} {
		ts := []unix.Timespec{{Sec: 1_000_000_000}, {Sec: 1_500_000_000}}
		must(t, unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(dir, p), ts, unix.AT_SYMLINK_NOFOLLOW))
	}
	return dir
}
