package fs_test

// rejected/ bounded per writing uid and in all, and its log lines rate
// limited.

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/testfs"
)

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
