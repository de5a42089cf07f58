package fs_test

// Resource exhaustion by a mount user (issue 9, items 7, 8 and 9):
// rejected/ that grows without bound (and its log lines), root's
// reserved blocks eaten through the mount, and one uid holding every
// descriptor of the daemon.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/testfs"
)

// resJournalMax is the longest path below the mount that a journal
// record can name (journal/record.go, maxTarget).
const resJournalMax = 64 << 10

// resPerl runs a Perl script as c (nil: root) with cwd "/", bounded by
// limit (a guard against a hang only), and returns its stdout. A
// non-zero exit or a kill by the limit fails the test.
func resPerl(t testing.TB, c *testfs.Cred, limit time.Duration, script string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := execCmd(ctx, "perl", append([]string{"-e", script}, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	if c != nil {
		testfs.AsUser(cmd, *c)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("perl %q: killed after %v (hung); output:\n%s%s", args, limit, out.String(), errb.String())
	}
	if err != nil {
		t.Fatalf("perl %q: %v\n%s%s", args, err, out.String(), errb.String())
	}
	return out.String()
}

// resLines splits Perl output into lines.
func resLines(s string) []string {
	return strings.Split(strings.TrimSpace(s), "\n")
}

// resChown gives path to c.
func resChown(t testing.TB, path string, c testfs.Cred) {
	t.Helper()
	must(t, os.Chown(path, int(c.Uid), int(c.Gid)))
}

// resStats reads the mount's counters.
func (p *advPrepared) resStats() fs.Stats { return p.srv.Stats() }

// resDeepName is a 250-byte directory name; nested, it makes paths longer
// than PATH_MAX and than the journal's maxTarget.
var resDeepName = strings.Repeat("d", 250)

// resMkDeep is a Perl script: chdir TOP, then LEVELS times mkdir NAME
// and chdir into it (relative, so no system call sees a long path). It
// prints one line per level: "MKDIR <level> <length of the path below
// TOP> OK|ERR <errno>", stopping at the first failure. With SHORT_AT,
// at that level it also creates a file "ok" in the new directory,
// writes and closes it: "SHORT <path length> OK|ERR <errno>". Then,
// in the deepest directory reached, it creates FILE (O_WRONLY|O_CREAT|
// O_TRUNC), writes 4 KiB and closes it: "CREATE <path length> ERR
// <errno>" if the open failed, "CREATE <length> OPENED close=OK|ERR
// <errno>" if it did not.
const resMkDeep = `
use strict; use Fcntl;
my ($top, $levels, $name, $file, $short_at) = @ARGV;
chdir($top) or die "chdir $top: $!";
my $len = 0;
for my $i (1..$levels) {
  my $new = $len == 0 ? length($name) : $len + 1 + length($name);
  if (!mkdir($name, 0755)) { print "MKDIR $i $new ERR " . ($!+0) . "\n"; last; }
  print "MKDIR $i $new OK\n";
  chdir($name) or die "chdir level $i: $!";
  $len = $new;
  if (defined $short_at && $short_at == $i) {
    my $l = $len + 3; my $f;
    my $ok = sysopen($f, "ok", O_WRONLY|O_CREAT|O_TRUNC, 0644) && defined(syswrite($f, "short\n")) && close($f);
    print "SHORT $l " . ($ok ? "OK" : "ERR " . ($!+0)) . "\n";
  }
}
exit 0 if $file eq "";
my $l = $len + 1 + length($file); my $f;
if (sysopen($f, $file, O_WRONLY|O_CREAT|O_TRUNC, 0644)) {
  syswrite($f, "x" x 4096);
  my $ok = close($f);
  print "CREATE $l OPENED close=" . ($ok ? "OK" : "ERR " . ($!+0)) . "\n";
} else {
  print "CREATE $l ERR " . ($!+0) . "\n";
}
`

// resOpenDeep is a Perl script: chdir TOP, chdir NAME LEVELS times, then
// open FILE (existing) O_WRONLY, write and close it: "OPEN ERR <errno>"
// or "OPENED close=OK|ERR <errno>".
const resOpenDeep = `
use strict; use Fcntl;
my ($top, $levels, $name, $file) = @ARGV;
chdir($top) or die "chdir $top: $!";
for my $i (1..$levels) { chdir($name) or die "chdir level $i: $!"; }
my $f;
if (sysopen($f, $file, O_WRONLY)) {
  syswrite($f, "y" x 4096);
  my $ok = close($f);
  print "OPENED close=" . ($ok ? "OK" : "ERR " . ($!+0)) . "\n";
} else {
  print "OPEN ERR " . ($!+0) . "\n";
}
`

// resDeepDirfd walks levels directories named name below top with
// openat, as root, and returns an O_PATH fd of the deepest.
func resDeepDirfd(t testing.TB, top string, levels int, name string) int {
	t.Helper()
	fd, err := unix.Open(top, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	for i := 0; i < levels; i++ {
		nfd, err := unix.Openat(fd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatalf("openat level %d: %v", i+1, err)
		}
		fd = nfd
	}
	return fd
}

// TestResDeepPathFailsEarly (item 7a): www-data builds, through the mount,
// nested directories of 250-byte names until their path below the mount
// is longer than a journal record can name (64 KiB). Such a file can
// never be committed, so it must fail where it is made: the mkdir that
// makes the path too long, or at the latest the create of a file in the
// deepest directory, fails with ENAMETOOLONG. Today the create and the
// writes succeed and the close fails (ENAMETOOLONG from the journal),
// with the bytes kept in rejected/: a loop of this fills the disk.
// Likewise an existing file that deep (made directly in BACKING) must
// fail at open for writing, not at close. Paths a little shorter than
// the limit keep working.
func TestResDeepPathFailsEarly(t *testing.T) {
	www := testfs.LookupUser(t, "www-data")
	p := advNewDirs(t)
	resChown(t, p.Backing, www)
	must(t, p.mount(t))
	before := p.resStats()

	const levels = 270 // 270*251 bytes: well over 64 KiB
	const shortAt = 259
	fileName := strings.Repeat("f", 250)
	out := resPerl(t, &www, 120*time.Second, resMkDeep, p.Dir, strconv.Itoa(levels), resDeepName, fileName, strconv.Itoa(shortAt))
	deepest, deepLen := 0, 0
	var mkdirFail, createLine, shortLine string
	for _, l := range resLines(out) {
		f := strings.Fields(l)
		switch f[0] {
		case "MKDIR":
			n, _ := strconv.Atoi(f[2])
			if f[3] == "OK" {
				deepest, _ = strconv.Atoi(f[1])
				deepLen = n
				// Reported once: at the first level over the limit.
				if n > resJournalMax && n-len(resDeepName)-1 <= resJournalMax {
					t.Errorf("mkdir through the mount made a directory whose path is %d bytes long (> %d, the journal's limit): want ENAMETOOLONG", n, resJournalMax)
				}
			} else {
				mkdirFail = l
			}
		case "CREATE":
			createLine = l
		case "SHORT":
			shortLine = l
		}
	}
	t.Logf("deepest directory: level %d, path %d bytes; first failed mkdir: %q; create: %q; short: %q", deepest, deepLen, mkdirFail, createLine, shortLine)
	if mkdirFail != "" {
		f := strings.Fields(mkdirFail)
		n, _ := strconv.Atoi(f[2])
		if e := f[4]; e != strconv.Itoa(int(syscall.ENAMETOOLONG)) {
			t.Errorf("mkdir of a %d-byte path failed with errno %s, want ENAMETOOLONG (%d)", n, e, syscall.ENAMETOOLONG)
		}
		if n <= resJournalMax {
			t.Errorf("mkdir of a %d-byte path (within the journal's %d) failed: %q", n, resJournalMax, mkdirFail)
		}
	}
	if shortLine != "SHORT "+strconv.Itoa(shortAt*251-1+3)+" OK" {
		t.Errorf("a short file at a path of %d bytes (within the journal's limit) could not be written: %q", shortAt*251-1+3, shortLine)
	}
	wantCreate := fmt.Sprintf("CREATE %d ERR %d", deepLen+1+len(fileName), syscall.ENAMETOOLONG)
	if createLine != wantCreate {
		t.Errorf("create of a file whose path is %d bytes: got %q, want %q (fail at open, not at close)", deepLen+1+len(fileName), createLine, wantCreate)
	}

	// An existing file that deep, made directly in BACKING: an open for
	// writing must fail at once, not take bytes it cannot commit.
	dfd := resDeepDirfd(t, p.Backing, deepest, resDeepName)
	fd, err := unix.Openat(dfd, fileName, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	unix.Close(dfd)
	must(t, err)
	must(t, unix.Fchown(fd, int(www.Uid), int(www.Gid)))
	unix.Close(fd)
	// Made directly in BACKING just after the create through the mount
	// failed: the kernel may hold the name's absence for up to 1 s.
	for range 20 {
		out = strings.TrimSpace(resPerl(t, &www, 120*time.Second, resOpenDeep, p.Dir, strconv.Itoa(deepest), resDeepName, fileName))
		if out != fmt.Sprintf("OPEN ERR %d", syscall.ENOENT) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if want := fmt.Sprintf("OPEN ERR %d", syscall.ENAMETOOLONG); out != want {
		t.Errorf("open for writing of an existing file whose path is %d bytes: got %q, want %q (fail at open, not at close)", deepLen+1+len(fileName), out, want)
	}

	n, bytes := advStagingUsage(t, p.Backing, "rejected")
	after := p.resStats()
	if n != 0 || after.Rejected != before.Rejected {
		t.Errorf("a path too long for the journal was accepted and its commit rejected: %d files (%d bytes) in .safefs/rejected, Stats().Rejected %d -> %d; want none",
			n, bytes, before.Rejected, after.Rejected)
	}
}

// resStaleLoop is a Perl script: COUNT times, open MNT/NAME for writing
// (O_CREAT|O_TRUNC), write SIZE bytes, then replace BACKING/NAME directly
// (a new file renamed over it) and close: the commit is refused with
// ESTALE. Prints "CLOSE OK" or "CLOSE ERR <errno>" (or "OPEN|WRITE ERR
// <errno>") per round.
const resStaleLoop = `
use strict; use Fcntl;
my ($m, $b, $nm, $n, $size) = @ARGV;
my $data = "r" x $size;
for my $i (1..$n) {
  my $f;
  if (!sysopen($f, "$m/$nm", O_WRONLY|O_CREAT|O_TRUNC, 0644)) { print "OPEN ERR " . ($!+0) . "\n"; next; }
  my $w = syswrite($f, $data);
  if (!defined $w || $w != $size) { print "WRITE ERR " . ($!+0) . "\n"; close($f); next; }
  open(my $g, '>', "$b/$nm.new") or die "$b/$nm.new: $!";
  print $g "outside $i\n"; close($g) or die "close $b/$nm.new: $!";
  rename("$b/$nm.new", "$b/$nm") or die "rename: $!";
  if (close($f)) { print "CLOSE OK\n" } else { print "CLOSE ERR " . ($!+0) . "\n" }
}
`

// resStale runs resStaleLoop as c on sub/f (sub a directory of c's in
// BACKING) and fails the test unless every close returned ESTALE.
func resStale(t testing.TB, p *advPrepared, c testfs.Cred, sub string, count, size int) {
	t.Helper()
	out := resPerl(t, &c, 120*time.Second, resStaleLoop, p.path(sub), p.bpath(sub), "f", strconv.Itoa(count), strconv.Itoa(size))
	lines := resLines(out)
	want := fmt.Sprintf("CLOSE ERR %d", syscall.ESTALE)
	bad := 0
	for _, l := range lines {
		if l != want {
			bad++
		}
	}
	if len(lines) != count || bad != 0 {
		t.Errorf("uid %d: %d rounds of write-then-replace: want every close to fail with ESTALE (%q); got:\n%s", c.Uid, count, want, out)
	}
}

// resUserDir makes BACKING/sub owned by c.
func resUserDir(t testing.TB, p *advPrepared, sub string, c testfs.Cred) {
	t.Helper()
	must(t, os.Mkdir(p.bpath(sub), 0o755))
	resChown(t, p.bpath(sub), c)
}

// TestResRejectedBounded (item 7b): rejected commits are kept in
// rejected/ only up to RejectedUserMax per writing uid and RejectedMax in
// all; beyond, the caller still gets the commit's errno (ESTALE here) but
// the bytes are dropped and counted in Stats().Dropped. The bound is per
// uid: one uid's flood does not stop another's rejection from being kept.
// Today every rejection is kept: 30 rounds of 100 KiB by www-data leave
// 3 MiB, and a loop fills the disk.
func TestResRejectedBounded(t *testing.T) {
	www := testfs.LookupUser(t, "www-data")
	nobody := testfs.LookupUser(t, "nobody")
	const (
		userMax = 1 << 20
		allMax  = 4 << 20
		size    = 100 << 10
		slack   = 128 << 10 // one commit, rounded up to blocks
	)
	p := advNewDirs(t)
	resUserDir(t, p, "w", www)
	resUserDir(t, p, "n", nobody)
	others := []testfs.Cred{{Uid: 40001, Gid: 40001}, {Uid: 40002, Gid: 40002}, {Uid: 40003, Gid: 40003}, {Uid: 40004, Gid: 40004}}
	for _, c := range others {
		resUserDir(t, p, fmt.Sprintf("u%d", c.Uid), c)
	}
	must(t, p.mount(t, func(o *fs.Options) {
		o.RejectedUserMax = userMax
		o.RejectedMax = allMax
	}))
	before := p.resStats()

	// www-data: 30 rejected commits of 100 KiB, 3 MiB in all.
	resStale(t, p, www, "w", 30, size)
	n, used := advStagingUsage(t, p.Backing, "rejected")
	st := p.resStats()
	t.Logf("after www-data's 30 rejections: rejected/ holds %d files, %d bytes; stats %+v", n, used, st)
	if used > userMax+slack {
		t.Errorf("rejected/ holds %d bytes (%d files) after 30 rejected commits of %d bytes by one uid: want at most RejectedUserMax %d + one commit",
			used, n, size, userMax)
	}
	if st.Dropped <= before.Dropped {
		t.Errorf("Stats().Dropped = %d (was %d): want the rejections beyond RejectedUserMax counted as dropped", st.Dropped, before.Dropped)
	}

	// Another uid's rejection is still kept: the bound is per uid.
	resStale(t, p, nobody, "n", 1, size)
	n2, used2 := advStagingUsage(t, p.Backing, "rejected")
	st2 := p.resStats()
	if n2 <= n || used2 < used+size || st2.Dropped != st.Dropped {
		t.Errorf("nobody's first rejected commit was not kept while www-data is at its bound: rejected/ %d files %d bytes -> %d files %d bytes, Dropped %d -> %d",
			n, used, n2, used2, st.Dropped, st2.Dropped)
	}

	// Four more uids, 1.2 MiB each: the total stays bounded.
	for _, c := range others {
		resStale(t, p, c, fmt.Sprintf("u%d", c.Uid), 12, size)
	}
	n3, used3 := advStagingUsage(t, p.Backing, "rejected")
	st3 := p.resStats()
	t.Logf("after all: rejected/ holds %d files, %d bytes; stats %+v", n3, used3, st3)
	if used3 > allMax+slack {
		t.Errorf("rejected/ holds %d bytes (%d files) after 6 uids' rejections: want at most RejectedMax %d + one commit", used3, n3, allMax)
	}
	if st3.Dropped <= st2.Dropped {
		t.Errorf("Stats().Dropped = %d (was %d): want rejections beyond the bounds counted as dropped", st3.Dropped, st2.Dropped)
	}
}

// resStaleDeep is a Perl script: walk LEVELS directories NAME below BACK
// and below MNT (relative chdirs) and keep a handle on each deepest
// directory; then COUNT times: (in MNT) open f for writing, write 1 KiB,
// (in BACK) rename a new file over f, close: "CLOSE OK|ERR <errno>".
const resStaleDeep = `
use strict; use Fcntl;
my ($m, $b, $levels, $name, $n) = @ARGV;
sub walk { my ($top) = @_; chdir($top) or die "chdir $top: $!";
  for my $i (1..$levels) { chdir($name) or die "chdir level $i: $!"; }
  opendir(my $dh, ".") or die "opendir: $!"; return $dh; }
my $bdh = walk($b); my $mdh = walk($m);
for my $i (1..$n) {
  chdir($mdh) or die "fchdir mnt: $!";
  my $f;
  if (!sysopen($f, "f", O_WRONLY|O_CREAT|O_TRUNC, 0644)) { print "OPEN ERR " . ($!+0) . "\n"; next; }
  syswrite($f, "z" x 1024);
  chdir($bdh) or die "fchdir backing: $!";
  open(my $g, '>', "f.new") or die "f.new: $!"; print $g "outside $i\n"; close($g) or die;
  rename("f.new", "f") or die "rename: $!";
  if (close($f)) { print "CLOSE OK\n" } else { print "CLOSE ERR " . ($!+0) . "\n" }
}
`

// TestResRejectLogBounded (item 7c): every rejected commit is logged
// with its path; a path of about 60 KiB (deep directories) made each
// rejection cost 3 log lines of 60 KiB. With 50 rejections the log must
// stay small (paths truncated; repeated drops logged once per interval):
// under 1 MiB in all, and no line over 4 KiB.
func TestResRejectLogBounded(t *testing.T) {
	www := testfs.LookupUser(t, "www-data")
	p := advNewDirs(t)
	resChown(t, p.Backing, www)
	const levels = 240 // 240*251-1 = 60239 bytes, within the journal's limit
	out := resPerl(t, &www, 120*time.Second, resMkDeep, p.Backing, strconv.Itoa(levels), resDeepName, "")
	if l := resLines(out); len(l) != levels || !strings.HasSuffix(l[len(l)-1], " OK") {
		t.Fatalf("making the deep directories in BACKING: %s", out)
	}

	var logs syncBuffer
	logger := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&logs), zap.DebugLevel))
	must(t, p.mount(t, func(o *fs.Options) { o.Log = logger }))

	const rounds = 50
	out = resPerl(t, &www, 120*time.Second, resStaleDeep, p.Dir, p.Backing, strconv.Itoa(levels), resDeepName, strconv.Itoa(rounds))
	want := fmt.Sprintf("CLOSE ERR %d", syscall.ESTALE)
	if l := resLines(out); len(l) != rounds || strings.Count(out, want) != rounds {
		t.Errorf("want %d closes failing with ESTALE (%q), got:\n%s", rounds, want, firstN(out, 10))
	}
	_ = logger.Sync()

	all := logs.String()
	longest, count := 0, 0
	sc := bufio.NewScanner(strings.NewReader(all))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var sample string
	for sc.Scan() {
		count++
		if len(sc.Text()) > longest {
			longest = len(sc.Text())
			sample = sc.Text()
		}
	}
	t.Logf("log: %d bytes, %d lines, longest %d bytes", len(all), count, longest)
	if len(all) >= 1<<20 {
		t.Errorf("%d rejections of a %d-byte path wrote %d bytes of log: want under 1 MiB (truncate paths, log repeats once per interval)", rounds, levels*251+1, len(all))
	}
	if longest > 4<<10 {
		if len(sample) > 300 {
			sample = sample[:300] + "..."
		}
		t.Errorf("a log line of %d bytes: want none over 4 KiB; it begins: %s", longest, sample)
	}
}

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

// TestResNoSpaceKeepsRootReserve (item 8): staging and journal writes are
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

// resHolder is a Perl script run as a user: open COUNT files
// PREFIX000.. with MODE (w: O_WRONLY|O_CREAT, r: O_RDONLY), print one
// line per open ("OK" or "ERR <errno>"), then "READY", keep the files
// open until stdin ends, close them and print "CLOSED".
const resHolder = `
use strict; use Fcntl;
$| = 1;
my ($prefix, $count, $mode) = @ARGV;
my @open;
for my $i (0..$count-1) {
  my $f; my $p = sprintf("%s%03d", $prefix, $i);
  my $ok = $mode eq "w" ? sysopen($f, $p, O_WRONLY|O_CREAT, 0644) : sysopen($f, $p, O_RDONLY);
  if ($ok) { push @open, $f; print "OK\n"; } else { print "ERR " . ($!+0) . "\n"; }
}
print "READY\n";
while (<STDIN>) {}
close($_) for @open;
print "CLOSED\n";
`

// resHold is a running resHolder.
type resHold struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  *bufio.Scanner
	cancel context.CancelFunc
}

// resStartHolder starts resHolder as c and returns once every open was
// tried, with the count of successes and the errnos of the failures.
func resStartHolder(t *testing.T, c testfs.Cred, prefix string, count int, mode string) (*resHold, int, map[syscall.Errno]int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	cmd := execCmd(ctx, "perl", "-e", resHolder, prefix, strconv.Itoa(count), mode)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	testfs.AsUser(cmd, c)
	stdin, err := cmd.StdinPipe()
	must(t, err)
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	var errb syncBuffer
	cmd.Stderr = &errb
	must(t, cmd.Start())
	h := &resHold{cmd: cmd, stdin: stdin, lines: bufio.NewScanner(stdout), cancel: cancel}
	t.Cleanup(func() { h.stop(t) })
	ok, failed := 0, map[syscall.Errno]int{}
	for h.lines.Scan() {
		l := h.lines.Text()
		if l == "READY" {
			return h, ok, failed
		}
		if l == "OK" {
			ok++
		} else if e, err := strconv.Atoi(strings.TrimPrefix(l, "ERR ")); err == nil {
			failed[syscall.Errno(e)]++
		} else {
			t.Fatalf("holder: bad line %q", l)
		}
	}
	t.Fatalf("holder ended before READY (%d opened, failures %v); stderr: %s", ok, failed, errb.String())
	return nil, 0, nil
}

// stop closes the holder's files and waits for it.
func (h *resHold) stop(t *testing.T) {
	if h.cmd == nil {
		return
	}
	cmd := h.cmd
	h.cmd = nil
	defer h.cancel()
	h.stdin.Close()
	closed := false
	for h.lines.Scan() {
		closed = closed || h.lines.Text() == "CLOSED"
	}
	if err := cmd.Wait(); err != nil || !closed {
		t.Errorf("holder: %v (closed: %v)", err, closed)
	}
}

// resFailures formats the failures of a holder.
func resFailures(m map[syscall.Errno]int) string {
	var b strings.Builder
	for e, n := range m {
		fmt.Fprintf(&b, "%d x %v (%d); ", n, e, int(e))
	}
	return b.String()
}

// TestResFilesPerUserCap (item 9a): one non-root uid may hold at most
// MaxFilesPerUser files open through the mount (every open handle holds
// a daemon descriptor, readers too): EMFILE beyond, counted in
// Stats().TooManyFiles, while other users and root keep working. Today
// one www-data process could hold thousands of files open and take the
// daemon to its descriptor limit, and every other user got EMFILE.
func TestResFilesPerUserCap(t *testing.T) {
	www := testfs.LookupUser(t, "www-data")
	nobody := testfs.LookupUser(t, "nobody")
	reader := testfs.Cred{Uid: 40010, Gid: 40010}
	const (
		limit = 40
		tries = 60
	)
	p := advNewDirs(t)
	resUserDir(t, p, "w", www)
	resUserDir(t, p, "n", nobody)
	must(t, os.Mkdir(p.bpath("r"), 0o755))
	for i := 0; i < tries; i++ {
		must(t, os.WriteFile(p.bpath("r", fmt.Sprintf("r%03d", i)), []byte("read me\n"), 0o644))
	}
	must(t, os.WriteFile(p.bpath("rootfile"), []byte("old\n"), 0o600))
	must(t, p.mount(t, func(o *fs.Options) { o.MaxFilesPerUser = limit }))
	before := p.resStats()

	// www-data opens 60 files for writing and keeps them open.
	hold, ok, failed := resStartHolder(t, www, p.path("w", "f"), tries, "w")
	t.Logf("www-data: %d opens for writing succeeded; failures: %s", ok, resFailures(failed))
	if ok != limit || failed[syscall.EMFILE] != tries-limit {
		t.Errorf("www-data opening %d files for writing with MaxFilesPerUser %d: %d succeeded, failures %s; want exactly %d, the rest EMFILE",
			tries, limit, ok, resFailures(failed), limit)
	}
	st := p.resStats()
	if got := st.TooManyFiles - before.TooManyFiles; got != int64(tries-limit) {
		t.Errorf("Stats().TooManyFiles counted %d refusals, want %d", got, tries-limit)
	}

	// Meanwhile, another user and root are not affected.
	if r := advOp(t, &nobody, "", "write", p.path("n", "mine"), "nobody's\n"); r.Errno != 0 {
		t.Errorf("nobody writing a file through the mount while www-data holds its files: %v", r.Errno)
	}
	if err := os.WriteFile(p.path("rootfile"), []byte("new\n"), 0o600); err != nil {
		t.Errorf("root writing through the mount while www-data holds its files: %v", err)
	} else if b, _ := os.ReadFile(p.bpath("rootfile")); string(b) != "new\n" {
		t.Errorf("root's commit: BACKING holds %q, want %q", b, "new\n")
	}

	// Once www-data's files are closed it can open again (RELEASE is
	// asynchronous: allow the daemon a moment to see them all).
	hold.stop(t)
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := advOp(t, &www, "", "write", p.path("w", "again"), "again\n")
		if r.Errno == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("www-data still cannot open a file after closing all of its files: %v", r.Errno)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Readers hold daemon descriptors too: read-only opens are capped.
	st = p.resStats()
	hold, ok, failed = resStartHolder(t, reader, p.path("r", "r"), tries, "r")
	t.Logf("uid %d: %d opens for reading succeeded; failures: %s", reader.Uid, ok, resFailures(failed))
	if ok != limit || failed[syscall.EMFILE] != tries-limit {
		t.Errorf("uid %d opening %d files for reading with MaxFilesPerUser %d: %d succeeded, failures %s; want exactly %d, the rest EMFILE",
			reader.Uid, tries, limit, ok, resFailures(failed), limit)
	}
	if got := p.resStats().TooManyFiles - st.TooManyFiles; got != int64(tries-limit) {
		t.Errorf("Stats().TooManyFiles counted %d refusals of read-only opens, want %d", got, tries-limit)
	}
	// Root is not capped.
	if b, err := os.ReadFile(p.path("r", "r000")); err != nil || string(b) != "read me\n" {
		t.Errorf("root reading through the mount while uid %d holds its files: %q %v", reader.Uid, b, err)
	}
	hold.stop(t)
}
