package fs_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/journal"
	"github.com/safefs/safefs/testfs"
)

// advComponent is a 200-byte directory name, distinct per level.
func advComponent(i int) string {
	p := fmt.Sprintf("lvl%04d-", i)
	return p + strings.Repeat("d", 200-len(p))
}

// advWriteAt creates name in the directory fd dir (O_TRUNC), writes text
// and closes, returning the close error (the commit).
func advWriteAt(dir int, name, text string) error {
	fd, err := unix.Openat(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	_, werr := unix.Write(fd, []byte(text))
	return errors.Join(werr, unix.Close(fd))
}

func advReadAt(dir int, name string) (string, error) {
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	b := make([]byte, 256)
	n, err := unix.Read(fd, b)
	if err != nil {
		return "", err
	}
	return string(b[:n]), nil
}

// TestAdvDeepPath: directories nested through the mount up to an
// absolute path of ~4000 bytes (just under PATH_MAX), then further by
// walking with directory fds (Linux limits one path argument, not the
// depth), a file at each depth created, committed (replace, and
// in-place via a hard link) and read back through the mount and in
// BACKING.
func TestAdvDeepPath(t *testing.T) {
	m := testfs.New(t)
	// Absolute paths, up to ~4000 bytes.
	p := m.Dir
	var levels []string
	for i := 0; len(p)+1+200+1+4 < 4000; i++ {
		c := advComponent(i)
		p = filepath.Join(p, c)
		levels = append(levels, c)
		must(t, os.Mkdir(p, 0o755))
	}
	file := filepath.Join(p, "leaf")
	t.Logf("absolute path of %d bytes, %d levels", len(file), len(levels))
	must(t, os.WriteFile(file, []byte("deep\n"), 0o644))
	must(t, os.Link(file, filepath.Join(p, "leaf2")))
	must(t, os.WriteFile(file, []byte("deeper\n"), 0o644)) // in place: two links
	if b, err := os.ReadFile(file); err != nil || string(b) != "deeper\n" {
		t.Errorf("read back: %q %v", b, err)
	}
	rel := filepath.Join(append(levels, "leaf")...)
	bfd, err := unix.Open(m.Backing, unix.O_PATH|unix.O_DIRECTORY, 0)
	must(t, err)
	defer unix.Close(bfd)
	if s, err := advReadAt(bfd, rel); err != nil || s != "deeper\n" {
		t.Errorf("in BACKING: %q %v", s, err)
	}
	// `..` at depth, resolved by the kernel: lvlN/../lvlN/leaf.
	up := filepath.Dir(p) + "/" + levels[len(levels)-1] + "/../" + levels[len(levels)-1] + "/leaf"
	if b, err := os.ReadFile(up); err != nil || string(b) != "deeper\n" {
		t.Errorf("read through ..: %q %v", b, err)
	}

	// Beyond PATH_MAX relative to the mount root, by directory fds, up
	// to where the journal could not record a commit (64 KiB): the mkdir
	// that would pass it is refused, ENAMETOOLONG, as is a file there.
	dir, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	defer func() { unix.Close(dir) }()
	total := len(rel)
	checkpoints := map[string]int{"8 KiB": 8 << 10, "60 KiB": 60 << 10}
	for i := len(levels); ; i++ {
		c := advComponent(i)
		if err := unix.Mkdirat(dir, c, 0o755); err != nil {
			if total+1+len(c) <= journal.MaxTarget || err != unix.ENAMETOOLONG {
				t.Errorf("mkdir at depth %d (%d bytes): %v", i, total+1+len(c), err)
			}
			t.Logf("mkdir at depth %d (%d bytes): %v", i, total+1+len(c), err)
			break
		}
		if total+1+len(c) > journal.MaxTarget {
			t.Errorf("mkdir at depth %d made a directory %d bytes deep: past the journal's limit", i, total+1+len(c))
			break
		}
		next, err := unix.Openat(dir, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		must(t, err)
		unix.Close(dir)
		dir = next
		total += 1 + len(c)
		for what, at := range checkpoints {
			if total < at {
				continue
			}
			delete(checkpoints, what)
			werr := advWriteAt(dir, "leaf", "at "+what)
			got, rerr := advReadAt(dir, "leaf")
			t.Logf("file at %d bytes below the mount root (%s): close %v; reads %q %v", total+5, what, werr, got, rerr)
			if werr != nil || got != "at "+what {
				t.Errorf("%s: a file %d bytes deep: write %v, reads %q %v", what, total+5, werr, got, rerr)
			}
		}
	}
	if len(checkpoints) > 0 {
		t.Errorf("never reached %v", checkpoints)
	}
	// The mkdir of a 200-byte name failed, so a 255-byte one is past too.
	if err := advWriteAt(dir, strings.Repeat("x", 255), "x"); advErrno(err) != syscall.ENAMETOOLONG {
		t.Errorf("a file %d bytes deep: %v, want ENAMETOOLONG at create", total+256, err)
	}
}

// TestAdvDotDot: `..` components are resolved by the kernel; what reaches
// safefs is always one name in one directory, so a path with `..` lands
// exactly where the same path would on a plain file system.
func TestAdvDotDot(t *testing.T) {
	m := testfs.New(t)
	must(t, os.MkdirAll(m.Path("a", "b", "c"), 0o755))
	must(t, os.Mkdir(m.Path("x"), 0o755))
	must(t, os.Symlink("..", m.Path("a", "b", "up")))
	must(t, os.Symlink("../../..", m.Path("a", "b", "c", "top")))
	cases := map[string]string{ // path under the mount -> where it must land in BACKING
		"a/b/../f1":            "a/f1",
		"a/b/c/../../../f2":    "f2",
		"a/./b/./c/.././f3":    "a/b/f3",
		"a/b/up/f4":            "a/f4",
		"a/b/c/top/f5":         "f5",
		"a/b/c/top/x/../x/f6":  "x/f6",
		"x/../a/b/c/../c/f7":   "a/b/c/f7",
		"a/b/up/b/up/b/c/f8":   "a/b/c/f8",
		"a/b/c/top/a/b/up/f9":  "a/f9",
		"x/../../mnt/x/f10":    "x/f10", // leaves the mount at its root and comes back by name
		"a/../../orig/a/f11":   "",      // leaves the mount for BACKING itself: not through safefs
		"a/b/c/../../../../..": "",
	}
	for rel, want := range cases {
		if want == "" {
			continue
		}
		text := "landed " + rel
		must(t, os.WriteFile(m.Dir+"/"+rel, []byte(text), 0o644))
		if b, err := os.ReadFile(m.BackingPath(want)); err != nil || string(b) != text {
			t.Errorf("%s: BACKING/%s holds %q (%v)", rel, want, b, err)
		}
	}
	// Renames with `..` in both paths.
	must(t, os.Rename(m.Path("a", "b", "c")+"/../../f1", m.Path("x")+"/../a/b/c/f1moved"))
	if _, err := os.Lstat(m.BackingPath("a", "b", "c", "f1moved")); err != nil {
		t.Errorf("rename through ..: %v", err)
	}
	// openat relative to a directory fd inside the mount, with `..`.
	dfd, err := unix.Open(m.Path("a", "b", "c"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	must(t, err)
	defer unix.Close(dfd)
	must(t, advWriteAt(dfd, "../../../x/f12", "via fd"))
	if b, err := os.ReadFile(m.BackingPath("x", "f12")); err != nil || string(b) != "via fd" {
		t.Errorf("openat with ..: %q %v", b, err)
	}
	// A directory moved directly in BACKING: the mount follows the
	// directory itself (the kernel's view after a new lookup), and `..`
	// is the kernel's parent, never a name outside BACKING.
	must(t, os.Rename(m.BackingPath("a", "b"), m.BackingPath("x", "b")))
	must(t, os.WriteFile(m.Path("x", "b", "c", "..", "f13"), []byte("after move"), 0o644))
	if b, err := os.ReadFile(m.BackingPath("x", "b", "f13")); err != nil || string(b) != "after move" {
		t.Errorf("after a move in BACKING: %q %v", b, err)
	}
	// Nothing was created outside BACKING next to it.
	ents, err := os.ReadDir(filepath.Dir(m.Backing))
	must(t, err)
	for _, e := range ents {
		if e.Name() != "orig" && e.Name() != "mnt" {
			t.Errorf("%s appeared next to BACKING", e.Name())
		}
	}
}
