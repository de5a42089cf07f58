package backing

// Fuzz targets for the only gate between a name and a backing system
// call: CheckName, OpenRel (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS)
// and openWalk (its fallback for kernels without openat2). Whatever the
// input, an open either fails or yields a file whose dev/ino belongs to
// the temp tree; never the outside sentinel, never through a symlink;
// and nothing outside the tree is created or changed.

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// fuzzTree is a tree with symlinks that point outside it (to a sentinel
// directory and file), a dangling symlink to a name outside, a relative
// symlink climbing out, and a symlink to itself.
type fuzzTree struct {
	root, outside string
	rootfd        int
}

func newFuzzTree(t testing.TB) *fuzzTree {
	t.Helper()
	base := t.TempDir()
	ft := &fuzzTree{root: filepath.Join(base, "tree"), outside: filepath.Join(base, "outside")}
	mk := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mk(os.MkdirAll(filepath.Join(ft.root, "a", "b"), 0o755))
	mk(os.MkdirAll(filepath.Join(ft.outside, "sub"), 0o755))
	mk(os.WriteFile(filepath.Join(ft.outside, "x"), []byte("outside x"), 0o644))
	mk(os.WriteFile(filepath.Join(ft.outside, "passwd"), []byte("outside passwd"), 0o644))
	mk(os.WriteFile(filepath.Join(ft.outside, "sub", "y"), []byte("outside y"), 0o644))
	mk(os.WriteFile(filepath.Join(ft.root, "f"), []byte("inside f"), 0o644))
	mk(os.WriteFile(filepath.Join(ft.root, "a", "g"), []byte("inside g"), 0o644))
	mk(os.WriteFile(filepath.Join(ft.root, "a", "b", "h"), []byte("inside h"), 0o644))
	mk(os.Symlink(ft.outside, filepath.Join(ft.root, "link")))
	mk(os.Symlink(filepath.Join(ft.outside, "x"), filepath.Join(ft.root, "flink")))
	mk(os.Symlink(filepath.Join(ft.outside, "new"), filepath.Join(ft.root, "dangle")))
	mk(os.Symlink("../../outside", filepath.Join(ft.root, "a", "up")))
	mk(os.Symlink("../f", filepath.Join(ft.root, "a", "rel")))
	mk(os.Symlink("loop", filepath.Join(ft.root, "loop")))
	mk(os.Symlink("/proc/self/root/etc/passwd", filepath.Join(ft.root, "magic")))
	fd, err := unix.Open(ft.root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	mk(err)
	ft.rootfd = fd
	t.Cleanup(func() { unix.Close(fd) })
	return ft
}

type fuzzKey struct{ dev, ino uint64 }

// inodes returns the dev/ino of every entry of dir (symlinks themselves,
// not followed), with dir itself, and the relative names.
func inodes(t testing.TB, dir string) (map[fuzzKey]string, []string) {
	t.Helper()
	keys := map[fuzzKey]string{}
	var names []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		keys[fuzzKey{uint64(st.Dev), st.Ino}] = rel
		names = append(names, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	return keys, names
}

// outsideState is the outside sentinel's names and contents.
func outsideState(t testing.TB, dir string) string {
	t.Helper()
	var b strings.Builder
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		b.WriteString(p + " " + fi.Mode().String() + " ")
		if fi.Mode().IsRegular() {
			c, _ := os.ReadFile(p)
			b.Write(c)
		}
		b.WriteString("\n")
		return nil
	})
	return b.String()
}

var fuzzFlags = []int{
	unix.O_RDONLY,
	unix.O_PATH,
	unix.O_PATH | unix.O_DIRECTORY,
	unix.O_RDONLY | unix.O_DIRECTORY,
	unix.O_RDWR,
	unix.O_WRONLY | unix.O_CREAT,
	unix.O_RDWR | unix.O_CREAT | unix.O_EXCL,
}

func fuzzSeeds(f *testing.F) {
	for _, s := range []string{
		"", ".", "..", "/", "//", "/etc/passwd", "../outside/x", "a/../../x", "a/../f", "a/b/../../f",
		"link", "link/x", "link/sub/y", "flink", "dangle", "a/up", "a/up/x", "a/rel", "loop", "loop/x",
		"magic", "f", "a/g", "a/b/h", "a//g", "./f", "a/./g", "f/", "a/", "new", "a/new",
		"/proc/self/root/etc/passwd", "/proc/self/cwd", "../../../../../../etc/passwd",
		"f\x00/etc/passwd", "\x00", "a\x00b", strings.Repeat("n", 255), strings.Repeat("n", 256),
		strings.Repeat("a/", 100) + "f", strings.Repeat("../", 50) + "etc/passwd", "link/../f", "a/up/../x",
	} {
		for i := range fuzzFlags {
			f.Add(s, uint8(i))
		}
	}
}

// checkOpened verifies one open: inside the tree, or failed; and cleans
// up what an O_CREAT made, so the tree stays small.
func checkOpened(t *testing.T, ft *fuzzTree, what, rel string, fd int, err error, orig map[string]bool, outside string) {
	t.Helper()
	if err == nil {
		defer unix.Close(fd)
		var st unix.Stat_t
		if serr := unix.Fstat(fd, &st); serr != nil {
			t.Fatalf("%s(%q): fstat: %v", what, rel, serr)
		}
		now, _ := inodes(t, ft.root)
		if _, ok := now[fuzzKey{uint64(st.Dev), st.Ino}]; !ok {
			link, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
			t.Fatalf("%s(%q) opened %s (dev %d ino %d), not in the tree", what, rel, link, st.Dev, st.Ino)
		}
	}
	if got := outsideState(t, ft.outside); got != outside {
		t.Fatalf("%s(%q): the outside sentinel changed:\n%s\nwas\n%s", what, rel, got, outside)
	}
	// Remove whatever was created inside (O_CREAT makes only files).
	_, names := inodes(t, ft.root)
	for i := len(names) - 1; i >= 0; i-- {
		if !orig[names[i]] {
			_ = os.Remove(filepath.Join(ft.root, names[i]))
		}
	}
}

// fuzzSetup makes the tree once per fuzzing process and records its
// names and the outside sentinel's state.
func fuzzSetup(f *testing.F) (*fuzzTree, map[string]bool, string) {
	ft := newFuzzTree(f)
	_, names := inodes(f, ft.root)
	orig := map[string]bool{}
	for _, n := range names {
		orig[n] = true
	}
	return ft, orig, outsideState(f, ft.outside)
}

// FuzzOpenRel: OpenRel and openWalk never open anything outside the tree.
func FuzzOpenRel(f *testing.F) {
	fuzzSeeds(f)
	ft, orig, outside := fuzzSetup(f)
	f.Fuzz(func(t *testing.T, rel string, sel uint8) {
		flags := fuzzFlags[int(sel)%len(fuzzFlags)] | unix.O_NONBLOCK
		fd, err := OpenRel(ft.rootfd, rel, flags, 0o644)
		checkOpened(t, ft, "OpenRel", rel, fd, err, orig, outside)
		if err == nil && (rel == "" || strings.HasPrefix(rel, "/") || strings.Contains(rel, "\x00")) {
			t.Errorf("OpenRel(%q) succeeded", rel)
		}
		fd, err = openWalk(ft.rootfd, rel, flags|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o644)
		checkOpened(t, ft, "openWalk", rel, fd, err, orig, outside)
		if err == nil {
			for _, p := range strings.Split(rel, "/") {
				if p == ".." || p == "." || p == "" {
					t.Errorf("openWalk(%q) accepted the component %q", rel, p)
				}
			}
		}
	})
}

// FuzzCheckName: CheckName accepts exactly one plain name component, and
// what it accepts, OpenAt opens inside the directory (or fails).
func FuzzCheckName(f *testing.F) {
	fuzzSeeds(f)
	ft, orig, outside := fuzzSetup(f)
	f.Fuzz(func(t *testing.T, name string, sel uint8) {
		err := CheckName(name)
		plain := name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00") && len(name) <= 255
		if (err == nil) != plain {
			t.Fatalf("CheckName(%q) = %v; plain component: %v", name, err, plain)
		}
		if len(name) > 255 && name != "" && !strings.ContainsAny(name, "/\x00") && err != unix.ENAMETOOLONG {
			t.Errorf("CheckName(%d bytes) = %v, want ENAMETOOLONG", len(name), err)
		}
		flags := fuzzFlags[int(sel)%len(fuzzFlags)] | unix.O_NONBLOCK
		fd, oerr := OpenAt(ft.rootfd, name, flags, 0o644)
		if err != nil && oerr == nil {
			unix.Close(fd)
			t.Fatalf("OpenAt(%q) succeeded where CheckName refused: %v", name, err)
		}
		checkOpened(t, ft, "OpenAt", name, fd, oerr, orig, outside)
		_, serr := StatAt(ft.rootfd, name)
		if err != nil && serr == nil {
			t.Errorf("StatAt(%q) succeeded where CheckName refused", name)
		}
	})
}
