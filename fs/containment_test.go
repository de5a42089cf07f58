package fs_test

// Requests that must stay inside BACKING, and xattr names that must stay
// hidden from the callers the backing file system hides them from.

import (
	"bytes"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/testfs"
)

// swpFind lists the paths below root (relative, symlinks not followed)
// whose last component is leaf; .safefs is skipped unless internal.
func swpFind(t testing.TB, root, leaf string, internal bool) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(root, func(p string, d iofs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		if !internal && d.IsDir() && rel == fs.InternalDir {
			return filepath.SkipDir
		}
		if d.Name() == leaf && rel != "." {
			out = append(out, rel)
		}
		return nil
	})
	return out
}

// swpHolding lists the regular files below root whose content is data.
func swpHolding(t testing.TB, root string, data []byte) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(root, func(p string, d iofs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && bytes.Equal(b, data) {
			rel, _ := filepath.Rel(root, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

// swpEscapeCase is one request root makes through the mount, under a
// directory that www-data has just moved out of BACKING. In args, "D/x"
// is x in the directory's mount path, "OTHER" and "OTHER2" root's files at the
// top of the mount.
type swpEscapeCase struct {
	name   string
	args   []string
	leaf   string // the entry the request makes under D
	commit bool   // args is a write on a descriptor opened before the move; close commits it
}

// TestAdvEscapeMovedDir: root looks up M/www/d (www-data's directory in
// BACKING) through the mount; www-data moves BACKING/www/d out of BACKING,
// to a directory of its own on the same file system; at once (well within
// the kernel's 1 s name cache) root, through the mount, creates a file in
// M/www/d, makes a directory, a symlink, a FIFO, links M/other to
// M/www/d/hl, renames M/other2 to M/www/d/moved, or closes a descriptor of
// M/www/d/f it wrote before the move. Nothing outside BACKING may be created, renamed into
// or changed (the outside directory is compared in every byte, mode,
// owner and time): each request fails (ENOENT, ESTALE, EXDEV or EACCES)
// or lands inside BACKING; the commit fails (ESTALE expected) or its
// bytes stay inside BACKING, and the outside f keeps its old content.
func TestAdvEscapeMovedDir(t *testing.T) {
	newBytes := "NEW bytes written by root through the mount\n"
	cases := []swpEscapeCase{
		{name: "create", args: []string{"writepath", "D/new", "root's new file\n"}, leaf: "new"},
		{name: "mkdir", args: []string{"mkdir", "D/sub", "0755"}, leaf: "sub"},
		{name: "symlink", args: []string{"symlink", "/etc/passwd", "D/sl"}, leaf: "sl"},
		{name: "mkfifo", args: []string{"mkfifo", "D/fifo", "0644"}, leaf: "fifo"},
		{name: "link", args: []string{"link", "OTHER", "D/hl"}, leaf: "hl"},
		{name: "rename", args: []string{"rename", "OTHER2", "D/moved"}, leaf: "moved"},
		{name: "commit", args: []string{"close", "F"}, commit: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := advNewDirs(t)
			www := testfs.LookupUser(t, "www-data")
			outside := filepath.Join(filepath.Dir(p.Backing), "outside")
			for _, d := range []string{p.bpath("www"), p.bpath("www", "d"), outside} {
				must(t, os.Mkdir(d, 0o755))
				must(t, os.Chown(d, int(www.Uid), int(www.Gid)))
			}
			old := []byte("old content of f\n")
			must(t, os.WriteFile(p.bpath("www", "d", "f"), old, 0o644))
			must(t, os.Chown(p.bpath("www", "d", "f"), int(www.Uid), int(www.Gid)))
			must(t, os.WriteFile(p.bpath("other"), []byte("root's other\n"), 0o644))
			must(t, os.WriteFile(p.bpath("other2"), []byte("root's other2\n"), 0o644))
			other2Ino := advLstat(t, p.bpath("other2")).Ino
			must(t, p.mount(t))

			rsh := swpStart(t, nil, "root", p.Dir)
			wsh := swpStart(t, &www, "www-data", p.Dir)
			args := swpExpand(c.args, map[string]string{"OTHER": p.path("other"), "OTHER2": p.path("other2")})
			for i, a := range args {
				if strings.HasPrefix(a, "D/") {
					args[i] = p.path("www", "d", strings.TrimPrefix(a, "D/"))
				}
			}

			rsh.ok("stat", p.path("www", "d")) // the kernel caches M/www/d (1 s), the daemon opens its directory fd
			if c.commit {
				rsh.ok("open", "F", p.path("www", "d", "f"), strconv.Itoa(unix.O_WRONLY|unix.O_TRUNC), "0")
				rsh.ok("write", "F", newBytes)
			}
			start := time.Now()
			wsh.ok("rename", p.bpath("www", "d"), filepath.Join(outside, "d"))
			before := advSnapshot(t, outside)

			r := rsh.do(args...)
			t.Logf("request %.0f ms after the move (the kernel keeps names 1 s)", float64(time.Since(start).Microseconds())/1000)
			what := fmt.Sprintf("root's %q under the moved directory", c.args)
			if c.commit {
				what = "close() of root's descriptor of d/f, written before the move"
			}
			switch r.Errno {
			case 0:
				t.Logf("%s: succeeded", what)
			case syscall.ENOENT, syscall.ESTALE, syscall.EXDEV, syscall.EACCES:
				t.Logf("%s: failed with %v (%d)", what, r.Errno, int(r.Errno))
			default:
				t.Errorf("%s: failed with %v (%d); want ENOENT, ESTALE, EXDEV or EACCES, or success inside BACKING", what, r.Errno, int(r.Errno))
			}

			after := advSnapshot(t, outside)
			advSameTree(t, "the directory outside BACKING (www-data's, where d was moved) after "+what, before, after)
			if b, err := os.ReadFile(filepath.Join(outside, "d", "f")); err != nil || !bytes.Equal(b, old) {
				t.Errorf("outside BACKING, d/f now holds %q (%v), want its old content %q", b, err, old)
			}

			switch {
			case c.commit:
				held := swpHolding(t, p.Backing, []byte(newBytes))
				if r.Errno == 0 && len(held) == 0 {
					t.Errorf("close() returned 0 but the written bytes are nowhere in BACKING")
				}
				t.Logf("files in BACKING holding the written bytes: %v", held)
			case r.Errno == 0:
				if in := swpFind(t, p.Backing, c.leaf, false); len(in) == 0 {
					t.Errorf("%s succeeded but %s is nowhere in BACKING (outside: %v)", what, c.leaf, swpFind(t, outside, c.leaf, true))
				} else {
					t.Logf("%s landed in BACKING at %v", c.leaf, in)
				}
			}
			if c.name == "link" && r.Errno != 0 {
				if st := advLstat(t, p.bpath("other")); st.Nlink != 1 {
					t.Errorf("link failed, yet root's other has %d links", st.Nlink)
				}
			}
			if c.name == "rename" && r.Errno != 0 {
				if st, err := os.Lstat(p.bpath("other2")); err != nil || st.Sys().(*syscall.Stat_t).Ino != other2Ino {
					t.Errorf("rename failed, yet BACKING/other2 is gone or another file: %v", err)
				}
			}
		})
	}
}

// swpXattrList parses the "," joined names of the shell's listxattr, as
// a sorted set, and the byte size the kernel list has.
func swpXattrList(detail string) ([]string, int) {
	var out []string
	size := 0
	for _, n := range strings.Split(detail, ",") {
		if n != "" {
			out = append(out, n)
			size += len(n) + 1
		}
	}
	sort.Strings(out)
	return out, size
}

// TestAdvEscapeListxattrTrusted: the backing file system hides trusted.*
// xattr names from callers without CAP_SYS_ADMIN; the daemon (root) sees
// them. Root sets trusted.x directly in BACKING on a file (and a
// directory) www-data can read. llistxattr as www-data through the mount
// must give exactly what llistxattr as www-data gives on BACKING (no
// trusted.*), and the size query (size 0) the same size, consistent
// with that list; root still sees trusted.x through the mount.
func TestAdvEscapeListxattrTrusted(t *testing.T) {
	p := advNewDirs(t)
	www := testfs.LookupUser(t, "www-data")
	must(t, os.WriteFile(p.bpath("tx"), []byte("public\n"), 0o644))
	must(t, os.Chmod(p.bpath("tx"), 0o644))
	must(t, os.Mkdir(p.bpath("dx"), 0o755))
	for _, n := range []string{"tx", "dx"} {
		must(t, unix.Lsetxattr(p.bpath(n), "user.visible", []byte("1"), 0))
		must(t, unix.Lsetxattr(p.bpath(n), "trusted.x", []byte("root-only trusted value"), 0))
	}
	must(t, p.mount(t))
	rsh := swpStart(t, nil, "root", p.Dir)
	wsh := swpStart(t, &www, "www-data", p.Dir)

	for _, n := range []string{"tx", "dx"} {
		t.Run(n, func(t *testing.T) {
			list := func(sh *swpShell, path string) ([]string, int, int) {
				t.Helper()
				l := sh.ok("listxattr", path)
				s := sh.ok("listxattrsize", path)
				names, size := swpXattrList(l.Detail)
				q, err := strconv.Atoi(s.Detail)
				if err != nil {
					t.Fatalf("size query answered %q", s.Detail)
				}
				return names, size, q
			}
			direct, directSize, directQ := list(wsh, p.bpath(n))
			mount, mountSize, mountQ := list(wsh, p.path(n))
			root, _, _ := list(rsh, p.path(n))
			t.Logf("www-data: on BACKING %v (size query %d); through the mount %v (size query %d); root through the mount %v",
				direct, directQ, mount, mountQ, root)
			if strings.Join(direct, ",") != "user.visible" {
				t.Fatalf("the test is wrong: www-data sees %v directly on BACKING", direct)
			}
			for _, x := range mount {
				if strings.HasPrefix(x, "trusted.") {
					t.Errorf("llistxattr as www-data through the mount shows %s, which BACKING hides from non-root callers", x)
				}
			}
			if strings.Join(mount, ",") != strings.Join(direct, ",") {
				t.Errorf("llistxattr as www-data: through the mount %v, on BACKING %v; want the same", mount, direct)
			}
			if mountQ != mountSize || mountQ != directQ {
				t.Errorf("llistxattr(path, NULL, 0) as www-data through the mount: %d; the list it returns is %d bytes, BACKING says %d (list %d bytes)",
					mountQ, mountSize, directQ, directSize)
			}
			if !strings.Contains(","+strings.Join(root, ",")+",", ",trusted.x,") {
				t.Errorf("root no longer sees trusted.x through the mount: %v", root)
			}
			// getxattr of a trusted name is refused by the kernel itself.
			gm, gd := wsh.do("getxattr", p.path(n), "trusted.x"), wsh.do("getxattr", p.bpath(n), "trusted.x")
			if gm.Errno != gd.Errno || gm.Errno == 0 {
				t.Errorf("getxattr trusted.x as www-data: through the mount %v %q, on BACKING %v", gm.Errno, gm.Detail, gd.Errno)
			}
		})
	}
}
