package fs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/testfs"
)

// TestAdvInodeReuseNeverAdopted (security round 3, item 1): a file F
// written through the mount, held open by a reader h1, rewritten through
// the mount, then removed directly in BACKING, must never be confused
// with a new file that takes its backing inode number. Before, the
// daemon kept F's version's number in its table; ext4 gave it to the
// next file made in the directory, which the daemon filed under F: a
// reopen of /proc/self/fd/h1 read root's new 0600 file, and fchmod(h1)
// changed its mode (a www-data script could make root's file 4755 and
// its own). On an ext4 image, as ext4 reuses a freed number at once.
func TestAdvInodeReuseNeverAdopted(t *testing.T) {
	testfs.Available(t)
	img := resLoopExt4(t)
	p := &advPrepared{Backing: filepath.Join(img, "backing"), Dir: filepath.Join(filepath.Dir(img), "mnt")}
	must(t, os.Mkdir(p.Backing, 0o755))
	must(t, os.Mkdir(p.Dir, 0o755))
	must(t, p.mount(t))
	t.Cleanup(func() { p.unmount(t) })
	must(t, os.Mkdir(p.path("d"), 0o755))

	f := p.path("d", "F")
	must(t, os.WriteFile(f, []byte("F v1\n"), 0o644))
	h1, err := os.Open(f)
	must(t, err)
	defer h1.Close()
	var hst unix.Stat_t
	must(t, unix.Fstat(int(h1.Fd()), &hst))
	must(t, os.WriteFile(f, []byte("F v2\n"), 0o644))
	freed := advLstat(t, p.bpath("d", "F")).Ino
	must(t, os.Remove(p.bpath("d", "F")))

	reused := 0
	for i := range 20 {
		g := p.path("d", fmt.Sprintf("G%d", i))
		must(t, os.WriteFile(g, []byte("root's secret\n"), 0o600))
		if advLstat(t, p.bpath("d", filepath.Base(g))).Ino == freed {
			reused++
		}
		if ino := advLstat(t, g).Ino; ino == hst.Ino {
			t.Errorf("%s shows F's inode number %d through the mount: filed under F", filepath.Base(g), ino)
		}
	}
	t.Logf("new files that took F's freed backing number: %d of 20", reused)

	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fd/%d", h1.Fd()))
	if strings.Contains(string(b), "secret") {
		t.Errorf("a reopen of F's descriptor read another file: %q", b)
	}
	t.Logf("reopen of F's descriptor: %q, %v", b, err)
	err = unix.Fchmod(int(h1.Fd()), 0o4755)
	t.Logf("fchmod of F's descriptor: %v", err)
	for i := range 20 {
		nm := fmt.Sprintf("G%d", i)
		if mode := advLstat(t, p.bpath("d", nm)).Mode & 07777; mode != 0o600 {
			t.Errorf("fchmod of F's descriptor changed %s to %o", nm, mode)
		}
	}
}

// TestAdvInodeReuseClosedFile: the same without an open file, the
// kernel still holding F's node (an O_PATH descriptor sends no OPEN): a
// new file that takes the freed number of F's version is another file,
// with an inode number of its own through the mount, whether F was
// removed directly in BACKING or through the mount.
func TestAdvInodeReuseClosedFile(t *testing.T) {
	testfs.Available(t)
	img := resLoopExt4(t)
	p := &advPrepared{Backing: filepath.Join(img, "backing"), Dir: filepath.Join(filepath.Dir(img), "mnt")}
	must(t, os.Mkdir(p.Backing, 0o755))
	must(t, os.Mkdir(p.Dir, 0o755))
	must(t, p.mount(t))
	t.Cleanup(func() { p.unmount(t) })
	for _, how := range []string{"in BACKING", "through the mount"} {
		d := p.path(strings.ReplaceAll(how, " ", "-"))
		must(t, os.Mkdir(d, 0o755))
		f := filepath.Join(d, "F")
		must(t, os.WriteFile(f, []byte("F\n"), 0o644))
		node, err := unix.Open(f, unix.O_PATH|unix.O_CLOEXEC, 0)
		must(t, err)
		fino := advLstat(t, f).Ino
		freed := advLstat(t, p.bpath(filepath.Base(d), "F")).Ino
		if how == "in BACKING" {
			must(t, os.Remove(p.bpath(filepath.Base(d), "F")))
		} else {
			must(t, os.Remove(f))
		}
		reused := 0
		for i := range 10 {
			g := filepath.Join(d, fmt.Sprintf("G%d", i))
			must(t, os.WriteFile(g, []byte("G\n"), 0o600))
			if advLstat(t, p.bpath(filepath.Base(d), filepath.Base(g))).Ino == freed {
				reused++
			}
			if ino := advLstat(t, g).Ino; ino == fino {
				t.Errorf("F removed %s: %s shows F's inode %d", how, filepath.Base(g), ino)
			}
		}
		unix.Close(node)
		t.Logf("F removed %s: %d of 10 new files took its backing number", how, reused)
	}
}
