package fs_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/testfs"
)

// advSwapWorkload is www-data's side of TestAdvSymlinkSwapRace: every kind
// of request that makes the daemon touch BACKING, on names under the
// swapped directory and on a swapped file, ignoring errors.
const advSwapWorkload = `
use strict; use Fcntl;
my ($mnt, $n) = @ARGV;
my ($ok, $err) = (0, 0);
sub r { if ($_[0]) { $ok++ } else { $err++ } }
for my $i (1..$n) {
  my $f;
  r(sysopen($f, "$mnt/d/f", O_WRONLY|O_TRUNC) && defined(syswrite($f, "v$i\n")) && close($f));
  r(sysopen($f, "$mnt/d/log", O_WRONLY|O_APPEND|O_CREAT, 0644) && defined(syswrite($f, "a$i\n")) && close($f));
  r(sysopen($f, "$mnt/d/new$i", O_WRONLY|O_CREAT|O_EXCL, 0644) && defined(syswrite($f, "n$i\n")) && close($f));
  r(rename("$mnt/d/new$i", "$mnt/d/renamed"));
  r(chmod(0640, "$mnt/d/renamed"));
  r(chown($<, $(+0, "$mnt/d/renamed"));
  r(utime(undef, undef, "$mnt/d/f"));
  r(truncate("$mnt/d/f", 1));
  r(mkdir("$mnt/d/sub$i", 0755) && rmdir("$mnt/d/sub$i"));
  r(symlink("x", "$mnt/d/sl$i") && unlink("$mnt/d/sl$i"));
  r(link("$mnt/d/renamed", "$mnt/d/hl") && unlink("$mnt/d/hl"));
  r(sysopen($f, "$mnt/e/f2", O_RDWR) && defined(syswrite($f, "w$i\n")) && close($f));
  r(sysopen($f, "$mnt/e/f2", O_WRONLY|O_APPEND) && defined(syswrite($f, "+\n")) && close($f));
  r(truncate("$mnt/e/f2", 3));
  r(chmod(0644, "$mnt/e/f2"));
  my $b; r(sysopen($f, "$mnt/d/f", O_RDONLY) && defined(sysread($f, $b, 100)) && close($f));
  my $dh; r(opendir($dh, "$mnt/d") && scalar(my @x = readdir($dh)) && closedir($dh));
  unlink("$mnt/d/renamed");
}
print "DONE ok=$ok err=$err\n";
`

// TestAdvSymlinkSwapRace: while www-data writes through the mount, a
// goroutine writing directly in BACKING keeps renaming a directory away
// and putting a symlink to an outside sentinel directory in its place
// (and back), and does the same to a file with a symlink to a sentinel
// file. The daemon (root) must never read, create, write, chmod, chown
// or rename anything outside BACKING: the sentinel, including atimes,
// is identical afterwards. www-data's own path resolution of the symlinks
// cannot reach the sentinel (0700 root), so a change there can only come
// from the daemon.
func TestAdvSymlinkSwapRace(t *testing.T) {
	// The swaps leave names missing for moments; a cached absence would
	// fail the workload's lookups for a second each and leave the
	// daemon nothing to race. Without it the kernel may send any request
	// sequence it would send with it, so the race covers both.
	m := testfs.New(t, func(o *fs.Options) { o.AbsentCache = false })
	www := testfs.LookupUser(t, "www-data")
	sent := advSentinel(t)
	before := advSnapshot(t, sent)

	for _, d := range []string{"d", "e"} {
		must(t, os.Mkdir(m.BackingPath(d), 0o755))
		must(t, os.Chown(m.BackingPath(d), int(www.Uid), int(www.Gid)))
	}
	for _, f := range []string{"d/f", "d/log", "e/f2"} {
		must(t, os.WriteFile(m.BackingPath(f), []byte("v0\n"), 0o644))
		must(t, os.Chown(m.BackingPath(f), int(www.Uid), int(www.Gid)))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stop atomic.Bool
	var swaps atomic.Int64
	var wg sync.WaitGroup
	// Each swapper works through an O_PATH fd of the real parent
	// directory: a path through BACKING/d would itself follow the symlink
	// another swapper just put there.
	swapper := func(dfd int, name, target string) {
		defer wg.Done()
		away := name + ".away"
		for !stop.Load() && ctx.Err() == nil {
			if err := unix.Renameat(dfd, name, dfd, away); err != nil {
				t.Errorf("swapper: %v", err)
				return
			}
			_ = unix.Symlinkat(target, dfd, name)
			_ = unix.Unlinkat(dfd, name, 0) // the symlink
			if err := unix.Renameat(dfd, away, dfd, name); err != nil {
				t.Errorf("swapper: %v", err)
				return
			}
			swaps.Add(1)
		}
	}
	dirFd := func(p string) int {
		fd, err := unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		must(t, err)
		t.Cleanup(func() { unix.Close(fd) })
		return fd
	}
	topFd, dFd, eFd := dirFd(m.Backing), dirFd(m.BackingPath("d")), dirFd(m.BackingPath("e"))
	wg.Add(3)
	go swapper(topFd, "d", sent)
	go swapper(eFd, "f2", filepath.Join(sent, "f"))
	go swapper(dFd, "f", filepath.Join(sent, "x"))

	cmd := testfs.AsUser(execCmd(ctx, "perl", "-e", advSwapWorkload, m.Dir, "400"), www)
	out, err := cmd.CombinedOutput()
	stop.Store(true)
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("workload did not finish within the deadline (a hang?): %s", out)
	}
	if err != nil {
		t.Fatalf("workload: %v\n%s", err, out)
	}
	t.Logf("www-data: %s; swaps: %d", strings.TrimSpace(string(out)), swaps.Load())
	if !bytes.Contains(out, []byte("DONE ok=")) || bytes.Contains(out, []byte("ok=0 ")) {
		t.Errorf("the workload never succeeded: the race proved nothing")
	}
	if swaps.Load() == 0 {
		t.Errorf("no swap was completed while the workload ran: the race proved nothing")
	}

	advSameTree(t, "sentinel outside BACKING", before, advSnapshot(t, sent))

	// BACKING is whole again: d is a directory, f and f2 regular files.
	for p, typ := range map[string]uint32{"d": unix.S_IFDIR, "e/f2": unix.S_IFREG, "d/f": unix.S_IFREG} {
		if st := advLstat(t, m.BackingPath(p)); st.Mode&unix.S_IFMT != typ {
			t.Errorf("BACKING/%s is %o after the race, want %o", p, st.Mode&unix.S_IFMT, typ)
		}
	}
	// And the mount works again. For up to the entry timeout (1 s) the
	// kernel may still hold "d" as the symlink it last looked up; safefs
	// answers its READLINK from BACKING, where "d" is a directory again,
	// so such an open fails (EINVAL) instead of going anywhere. Retry,
	// bounded by a deadline, until the entry expires.
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	var werr error
	for tries := 0; wctx.Err() == nil; tries++ {
		if werr = os.WriteFile(m.Path("d", "after"), []byte("ok"), 0o644); werr == nil {
			if tries > 0 {
				t.Logf("write after the race failed %d times before the stale entry expired", tries)
			}
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if werr != nil {
		t.Fatalf("write after the race: %v", werr)
	}
	if b, err := os.ReadFile(m.BackingPath("d", "after")); err != nil || string(b) != "ok" {
		t.Errorf("write after the race: %q %v", b, err)
	}
}

// TestAdvSymlinkWriteTarget: a symlink opened for writing through the
// mount. Through FUSE the kernel resolves symlinks itself (safefs only
// answers READLINK): a symlink pointing inside the mount writes its
// target through safefs; an absolute symlink pointing outside is resolved
// on the host by the caller's own path walk, with the caller's own
// permissions, exactly as on any file system, and safefs never sees that
// write. What safefs must guarantee: the symlink itself is never
// replaced by a regular file in BACKING, and a name that became a
// symlink in BACKING while a writer had it open is not committed over.
func TestAdvSymlinkWriteTarget(t *testing.T) {
	m := testfs.New(t)
	www := testfs.LookupUser(t, "www-data")
	outside := filepath.Join(t.TempDir(), "outside")
	must(t, os.Mkdir(outside, 0o755))
	must(t, os.WriteFile(filepath.Join(outside, "file"), []byte("outside\n"), 0o644))
	sent := advSentinel(t)
	sentBefore := advSnapshot(t, sent)

	must(t, os.WriteFile(m.BackingPath("in_target"), []byte("inside\n"), 0o666))
	must(t, os.Chmod(m.BackingPath("in_target"), 0o666))
	links := map[string]string{
		"lnk_in":     "in_target",
		"lnk_out":    filepath.Join(outside, "file"),
		"lnk_sent":   filepath.Join(sent, "x"),
		"lnk_dangle": "created_by_link",
	}
	for l, target := range links {
		must(t, os.Symlink(target, m.BackingPath(l)))
	}
	stillLinks := func(t *testing.T) {
		t.Helper()
		for l, target := range links {
			got, err := os.Readlink(m.BackingPath(l))
			if err != nil || got != target {
				t.Errorf("BACKING/%s is no longer the symlink to %s: %q %v", l, target, got, err)
			}
		}
	}
	write := func(p string, flags int, text string) error {
		f, err := os.OpenFile(p, flags, 0o644)
		if err != nil {
			return err
		}
		_, err = f.WriteString(text)
		return errors.Join(err, f.Close())
	}

	t.Run("inside", func(t *testing.T) {
		must(t, write(m.Path("lnk_in"), os.O_WRONLY|os.O_TRUNC, "new inside\n"))
		if b, _ := os.ReadFile(m.BackingPath("in_target")); string(b) != "new inside\n" {
			t.Errorf("in_target = %q, want the bytes written through lnk_in", b)
		}
		must(t, os.Truncate(m.Path("lnk_in"), 3))
		if b, _ := os.ReadFile(m.BackingPath("in_target")); string(b) != "new" {
			t.Errorf("in_target = %q after truncate through lnk_in", b)
		}
		r := advOp(t, &www, "", "write", m.Path("lnk_in"), "by www\n")
		if r.Errno != 0 {
			t.Errorf("www-data writing through lnk_in to a 0666 file: %v", r.Errno)
		}
		stillLinks(t)
	})
	t.Run("nofollow", func(t *testing.T) {
		err := write(m.Path("lnk_in"), os.O_WRONLY|os.O_TRUNC|syscall.O_NOFOLLOW, "x")
		if advErrno(err) != syscall.ELOOP {
			t.Errorf("O_NOFOLLOW open of a symlink: %v, want ELOOP", err)
		}
		err = write(m.Path("lnk_in"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, "x")
		if advErrno(err) != syscall.EEXIST {
			t.Errorf("O_CREAT|O_EXCL on a symlink: %v, want EEXIST", err)
		}
		stillLinks(t)
	})
	t.Run("dangling", func(t *testing.T) {
		// The kernel follows the dangling link and creates its target
		// through the mount, as on any file system.
		must(t, write(m.Path("lnk_dangle"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, "via dangling\n"))
		if b, err := os.ReadFile(m.BackingPath("created_by_link")); err != nil || string(b) != "via dangling\n" {
			t.Errorf("target of the dangling link: %q %v", b, err)
		}
		stillLinks(t)
	})
	t.Run("outside_root", func(t *testing.T) {
		// Root's own path resolution: safefs answers READLINK with the
		// link's text and the kernel resolves the absolute target on the
		// host, as on any file system, so the write lands in the outside
		// file, with root's rights, and safefs never sees it. What the
		// daemon must not do: replace the symlink with a regular file,
		// or stage or commit the bytes anywhere in BACKING.
		const text = "written through lnk_out\n"
		must(t, write(m.Path("lnk_out"), os.O_WRONLY|os.O_TRUNC, text))
		if b, err := os.ReadFile(filepath.Join(outside, "file")); err != nil || string(b) != text {
			t.Errorf("root writing through an absolute symlink to a file outside the mount: that file holds %q (%v), want %q, as on any file system", b, err, text)
		}
		if held := swpHolding(t, m.Backing, []byte(text)); len(held) != 0 {
			t.Errorf("the bytes written through lnk_out are in BACKING at %v: the daemon took part in a write the kernel resolved outside the mount", held)
		}
		if st, err := os.Lstat(filepath.Join(outside, "file")); err != nil || !st.Mode().IsRegular() {
			t.Errorf("the outside file is no longer a regular file: %v %v", st, err)
		}
		stillLinks(t)
	})
	t.Run("outside_www", func(t *testing.T) {
		r := advOp(t, &www, "", "write", m.Path("lnk_sent"), "by www\n")
		if r.Errno != syscall.EACCES {
			t.Errorf("www-data writing through a symlink into root's 0700 dir: %v, want EACCES", r.Errno)
		}
		stillLinks(t)
	})
	// A regular file becomes a symlink in BACKING while a writer has it
	// open: the commit must not rename its staging file over the symlink,
	// nor write through it.
	for _, mode := range []struct {
		name  string
		flags int
	}{{"replace", os.O_WRONLY | os.O_TRUNC}, {"rdwr", os.O_RDWR}, {"append", os.O_WRONLY | os.O_APPEND}} {
		t.Run("swapped_while_open_"+mode.name, func(t *testing.T) {
			nm := "g_" + mode.name
			pending := "pending " + mode.name + "\n" // longer than "g\n": the rdwr version is these bytes
			must(t, os.WriteFile(m.BackingPath(nm), []byte("g\n"), 0o644))
			f, err := os.OpenFile(m.Path(nm), mode.flags, 0)
			must(t, err)
			_, err = f.WriteString(pending)
			must(t, err)
			must(t, os.Rename(m.BackingPath(nm), m.BackingPath(nm+".away")))
			must(t, os.Symlink(filepath.Join(sent, "f"), m.BackingPath(nm)))
			err = f.Close()
			got, lerr := os.Readlink(m.BackingPath(nm))
			if lerr != nil || got != filepath.Join(sent, "f") {
				t.Errorf("BACKING/%s: the symlink was replaced (%q, %v); close said %v", nm, got, lerr, err)
			}
			// docs/manual.md, errno table: close() gets ESTALE when the file's name
			// now leads to another file; the previous version stays (here
			// under the name it was moved to) and the pending bytes are
			// kept in .safefs/rejected/.
			if advErrno(err) != syscall.ESTALE {
				t.Errorf("close after the name became a symlink in BACKING: %v, want ESTALE (the write could not be committed anywhere safe)", err)
			}
			if b, err := os.ReadFile(m.BackingPath(nm + ".away")); err != nil || string(b) != "g\n" {
				t.Errorf("the file the writer opened (moved to %s.away in BACKING) holds %q (%v), want its previous version %q", nm, b, err, "g\n")
			}
			if kept := swpHolding(t, filepath.Join(m.Backing, fs.InternalDir, "rejected"), []byte(pending)); len(kept) != 1 {
				t.Errorf("the refused commit's bytes %q are in %d files of .safefs/rejected/ (%v), want 1", pending, len(kept), kept)
			}
		})
	}
	advSameTree(t, "sentinel outside BACKING", sentBefore, advSnapshot(t, sent))
}
