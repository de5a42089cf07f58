package fs_test

// Root's reserved blocks kept through the mount:
// non-root writes stop at f_bavail less a reserve.

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/testfs"
)

// resStatfs is statfs of dir.
func resStatfs(t testing.TB, dir string) unix.Statfs_t {
	t.Helper()
	var st unix.Statfs_t
	must(t, unix.Statfs(dir, &st))
	return st
}

// resLoopExt4 makes a 64 MiB ext4 image with 5 % reserved blocks and
// loop-mounts it on a directory other users can reach; it is unmounted
// (and its loop device detached) in cleanup. Without loop devices it
// skips, or fails under CI.
func resLoopExt4(t *testing.T) string {
	t.Helper()
	skip := func(format string, a ...any) {
		t.Helper()
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set: "+format, a...)
		}
		t.Skipf(format, a...)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to loop-mount an image")
	}
	for _, tool := range []string{"mkfs.ext4", "mount", "umount", "losetup"} {
		if _, err := exec.LookPath(tool); err != nil {
			skip("no %s: %v", tool, err)
		}
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		skip("no loop devices: %v", err)
	}
	root := t.TempDir()
	for _, d := range []string{root, filepath.Dir(root)} {
		must(t, os.Chmod(d, 0o755))
	}
	img := filepath.Join(root, "img")
	dir := filepath.Join(root, "ext4")
	must(t, os.Mkdir(dir, 0o755))
	must(t, os.WriteFile(img, nil, 0o600))
	must(t, os.Truncate(img, 64<<20))
	if out, err := exec.Command("mkfs.ext4", "-q", "-m", "5", "-F", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v\n%s", err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, dir).CombinedOutput(); err != nil {
		skip("loop mount of an ext4 image does not work here: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if _, ok := advMounted(t, dir); ok {
			if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
				t.Errorf("umount %s: %v: %s; lazy unmount", dir, err, out)
				_ = unix.Unmount(dir, unix.MNT_DETACH)
			}
		}
		out, _ := exec.Command("losetup", "-j", img).Output()
		for _, l := range resLines(string(out)) {
			if dev, _, ok := strings.Cut(l, ":"); ok && strings.HasPrefix(dev, "/dev/loop") {
				if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
					t.Errorf("losetup -d %s: %v: %s", dev, err, out)
				}
			}
		}
	})
	must(t, os.Chmod(dir, 0o755))
	return dir
}

// resFill is a Perl script: write FILES files PREFIX0, PREFIX1, ... in 1
// MiB chunks, up to PER MiB each, closing each, until a write or close
// fails: "FILLED <bytes written> <where> <errno>" (where: open, write or
// close), or "FILLED <bytes> none 0" if nothing failed.
const resFill = `
use strict; use Fcntl;
my ($prefix, $files, $per) = @ARGV;
my $chunk = "w" x (1 << 20); my $total = 0;
for my $i (0..$files-1) {
  my $f;
  if (!sysopen($f, "$prefix$i", O_WRONLY|O_CREAT|O_TRUNC, 0644)) { print "FILLED $total open " . ($!+0) . "\n"; exit 0; }
  for my $j (1..$per) {
    my $off = 0;
    while ($off < length($chunk)) {
      my $w = syswrite($f, $chunk, length($chunk) - $off, $off);
      if (!defined $w) { my $e = $!+0; close($f); print "FILLED $total write $e\n"; exit 0; }
      $off += $w; $total += $w;
    }
  }
  if (!close($f)) { print "FILLED $total close " . ($!+0) . "\n"; exit 0; }
}
print "FILLED $total none 0\n";
`

// resFillAs runs resFill as c and returns its errno and where it failed.
func resFillAs(t *testing.T, c testfs.Cred, prefix string) (written int64, where string, errno syscall.Errno) {
	t.Helper()
	out := strings.TrimSpace(resPerl(t, &c, 300*time.Second, resFill, prefix, "100", "8"))
	f := strings.Fields(out)
	if len(f) != 4 || f[0] != "FILLED" {
		t.Fatalf("fill %s: bad output %q", prefix, out)
	}
	written, _ = strconv.ParseInt(f[1], 10, 64)
	e, _ := strconv.Atoi(f[3])
	return written, f[2], syscall.Errno(e)
}

// TestResNoSpaceKeepsRootReserve: staging and journal writes are
// made by root, so through the mount www-data could fill the file system
// into root's reserved blocks, to 0 free, after which root's own writes
// failed. A non-root caller's writes through the mount must stop where
// its own direct writes stop (f_bavail, less a small journal reserve):
// ENOSPC, counted in Stats().NoSpace, with root's reserve (nearly) whole
// and root still able to write and commit through the mount.
func TestResNoSpaceKeepsRootReserve(t *testing.T) {
	www := testfs.LookupUser(t, "www-data")
	testfs.Available(t)
	img := resLoopExt4(t)
	backing := filepath.Join(img, "backing")
	must(t, os.Mkdir(backing, 0o755))
	resChown(t, backing, www)
	sfs := resStatfs(t, img)
	bsize := int64(sfs.Bsize)
	reserve := int64(sfs.Bfree-sfs.Bavail) * bsize
	t.Logf("image: %d bytes free, %d available to users, reserve %d", int64(sfs.Bfree)*bsize, int64(sfs.Bavail)*bsize, reserve)
	if reserve < 1<<20 {
		t.Fatalf("the image has a reserve of %d bytes: want 5 %% of 64 MiB", reserve)
	}

	// Baseline: www-data writing directly stops at the reserve.
	written, where, errno := resFillAs(t, www, filepath.Join(backing, "direct"))
	sfs = resStatfs(t, img)
	t.Logf("www-data directly: %d bytes written, then %s: %v; free %d", written, where, errno, int64(sfs.Bfree)*bsize)
	if errno != syscall.ENOSPC || int64(sfs.Bfree)*bsize < reserve*8/10 {
		t.Fatalf("premise: www-data writing directly should stop with ENOSPC at the reserve: got %s %v with %d bytes free (reserve %d)",
			where, errno, int64(sfs.Bfree)*bsize, reserve)
	}
	files, err := filepath.Glob(filepath.Join(backing, "direct*"))
	must(t, err)
	for _, f := range files {
		must(t, os.Remove(f))
	}
	unix.Sync()

	mnt := filepath.Join(filepath.Dir(img), "mnt")
	must(t, os.Mkdir(mnt, 0o755))
	p := &advPrepared{Backing: backing, Dir: mnt}
	must(t, p.mount(t))
	before := p.resStats()

	written, where, errno = resFillAs(t, www, p.path("fill"))
	sfs = resStatfs(t, img)
	free := int64(sfs.Bfree) * bsize
	st := p.resStats()
	nrej, rejBytes := advStagingUsage(t, backing, "rejected")
	t.Logf("www-data through the mount: %d bytes written, then %s: %v; free %d (reserve %d); rejected/ %d files %d bytes; stats %+v",
		written, where, errno, free, reserve, nrej, rejBytes, st)
	if errno != syscall.ENOSPC {
		t.Errorf("www-data filling the file system through the mount: %s failed with %v, want ENOSPC", where, errno)
	}
	if free < reserve*8/10 {
		t.Errorf("www-data wrote through the mount into root's reserved blocks: %d bytes free, want at least 80 %% of the reserve %d", free, reserve)
	}
	if st.NoSpace <= before.NoSpace {
		t.Errorf("Stats().NoSpace = %d (was %d): want the refused writes counted", st.NoSpace, before.NoSpace)
	}

	// Root can still write and commit through the mount.
	data := bytes.Repeat([]byte("root\n"), (256<<10)/5)
	if err := os.WriteFile(p.path("root-file"), data, 0o600); err != nil {
		t.Errorf("root writing 256 KiB through the mount after www-data filled it: %v", err)
	} else if b, err := os.ReadFile(filepath.Join(backing, "root-file")); err != nil || !bytes.Equal(b, data) {
		t.Errorf("root's file in BACKING: %d bytes, %v; want the %d bytes written", len(b), err, len(data))
	}
}
