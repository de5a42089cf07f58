package fs_test

// Resource exhaustion by a mount user:
// paths too long to commit, and one uid holding every descriptor of the
// daemon. rejected/ that grows without bound (rejected_bounds_test.go)
// and root's reserved blocks eaten through the mount
// (disk_reserve_test.go, metadata_reserve_test.go) have files of their
// own; the helpers here serve all of them.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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

// TestResDeepPathFailsEarly: www-data builds, through the mount,
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

// TestResFilesPerUserCap: one non-root uid may hold at most
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
