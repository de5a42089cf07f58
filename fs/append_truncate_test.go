package fs_test

// ftruncate and fallocate on an O_APPEND descriptor.
// Today the handle's pending version is a list of bytes to append, but
// ftruncate(fd, n) copies the whole committed file into it and cuts or
// extends that: the commit then appends the copy, so the file is
// duplicated, and with n = 2^44-8192 the commit CRCs and copies 16 TiB of
// (sparse) zeros while holding the file's lock, for hours.
//
// What the fix guarantees: ftruncate (and fallocate) on an O_APPEND
// descriptor make its pending version a whole copy of the file (the
// committed content followed by the handle's own pending appends), cut or
// extended to the size; close() replaces the file with it (a replace
// commit, sparse, costing nothing for holes); later writes on that
// descriptor go to the end of that pending version. So the outcome is the
// one ext4 gives for the same calls, which the tests check on a plain twin
// file too.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/testfs"
)

// aptPerl opens ARGV[0] O_WRONLY|O_APPEND and runs the ops that follow on
// that one descriptor, in order:
//
//	w:HEX              write the bytes of HEX
//	t:N                ftruncate(fd, N) (Perl's truncate on a handle)
//	f:MODE:OFF:LEN     fallocate(fd, MODE, OFF, LEN)
//	say:WORD           print WORD on a line of its own (a progress mark)
//	c                  close(fd)
//
// It prints "OK" at the end, or "ERR <op> <errno>" at the first failure.
const aptPerl = `
use strict; use Fcntl;
$| = 1;
my ($path, @ops) = @ARGV; my $f;
sub fail { print "ERR $_[0] " . ($!+0) . "\n"; exit 0; }
sysopen($f, $path, O_WRONLY|O_APPEND) or fail("open");
for my $op (@ops) {
  my ($k, @v) = split(/:/, $op);
  if ($k eq 'w') { my $b = pack("H*", $v[0]); my $n = syswrite($f, $b); fail($op) unless defined $n && $n == length($b); }
  elsif ($k eq 't') { truncate($f, $v[0]) or fail($op); }
  elsif ($k eq 'f') { syscall(285, fileno($f), $v[0]+0, $v[1]+0, $v[2]+0) == 0 or fail($op); }
  elsif ($k eq 'say') { print "$v[0]\n"; }
  elsif ($k eq 'c') { close($f) or fail($op); }
  else { die "unknown op $op\n"; }
}
print "OK\n";
`

func aptW(s string) string { return "w:" + hex.EncodeToString([]byte(s)) }

func aptT(n int64) string { return "t:" + strconv.FormatInt(n, 10) }

// aptProc is a running aptPerl.
type aptProc struct {
	cmd   *exec.Cmd
	lines chan string // stdout, line by line; closed at EOF
	errb  bytes.Buffer
	done  chan struct{}
	err   error
	out   []string
}

// aptStart starts aptPerl as c on path with ops; the process is killed
// after limit.
func aptStart(t testing.TB, c testfs.Cred, limit time.Duration, path string, ops ...string) *aptProc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	cmd := execCmd(ctx, "perl", append([]string{"-e", aptPerl, path}, ops...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	testfs.AsUser(cmd, c)
	p := &aptProc{cmd: cmd, lines: make(chan string, 16), done: make(chan struct{})}
	cmd.Stderr = &p.errb
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() {
		defer cancel()
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.out = append(p.out, sc.Text())
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		close(p.lines)
		p.err = cmd.Wait()
		if ctx.Err() != nil {
			p.err = fmt.Errorf("killed after %v (hung)", limit)
		}
	}()
	return p
}

// waitLine waits for the line want (false: the process ended first).
func (p *aptProc) waitLine(want string) bool {
	for l := range p.lines {
		if l == want {
			return true
		}
	}
	return false
}

// result waits for the process and returns its last line ("OK" or
// "ERR <op> <errno>"), or an error if it did not run to its end.
func (p *aptProc) result() (string, error) {
	<-p.done
	if p.err != nil {
		return "", fmt.Errorf("perl: %v: %s %s", p.err, strings.Join(p.out, " | "), p.errb.String())
	}
	if len(p.out) == 0 {
		return "", fmt.Errorf("perl: no output: %s", p.errb.String())
	}
	return p.out[len(p.out)-1], nil
}

// aptRun runs aptPerl to its end (30 s at most) and returns its last line.
func aptRun(t testing.TB, c testfs.Cred, path string, ops ...string) string {
	t.Helper()
	r, err := aptStart(t, c, 30*time.Second, path, ops...).result()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// aptShow quotes b with runs of NUL bytes shown as <N NUL>.
func aptShow(b []byte) string {
	var out strings.Builder
	for len(b) > 0 {
		i := bytes.IndexByte(b, 0)
		if i < 0 {
			i = len(b)
		}
		if i > 0 {
			out.WriteString(strings.Trim(strconv.Quote(string(b[:i])), `"`))
		}
		b = b[i:]
		n := len(b) - len(bytes.TrimLeft(b, "\x00"))
		if n > 0 {
			fmt.Fprintf(&out, "<%d NUL>", n)
			b = b[n:]
		}
	}
	return `"` + out.String() + `"`
}

// aptFile makes path with content, owned by c, 0644.
func aptFile(t testing.TB, path, content string, c testfs.Cred) {
	t.Helper()
	must(t, os.WriteFile(path, []byte(content), 0o644))
	must(t, os.Chown(path, int(c.Uid), int(c.Gid)))
}

// TestAdvAppendTruncate: one O_APPEND descriptor of a file holding
// "line0\n", as www-data, through the mount and on a plain twin file: the
// calls, then close. The file must end as it does on ext4 (checked on the
// twin too): never the committed content appended to itself. Today
// ftruncate/fallocate copy the committed file into the pending appends,
// so the commit duplicates it.
func TestAdvAppendTruncate(t *testing.T) {
	m := testfs.New(t)
	www := testfs.LookupUser(t, "www-data")
	twin := filepath.Join(filepath.Dir(m.Backing), "twin")
	must(t, os.Mkdir(twin, 0o755))
	const line0 = "line0\n"
	nul := func(n int) string { return strings.Repeat("\x00", n) }
	cases := []struct {
		name string
		ops  []string
		want string
	}{
		{"ftruncate 20", []string{aptT(20)}, line0 + nul(14)},
		{"ftruncate 20 then write", []string{aptT(20), aptW("z\n")}, line0 + nul(14) + "z\n"},
		{"write, ftruncate 0, write", []string{aptW("a\n"), aptT(0), aptW("b\n")}, "b\n"},
		{"write, ftruncate 4 (inside the committed part)", []string{aptW("x\n"), aptT(4)}, "line"},
		{"write, ftruncate 20 (the append is kept)", []string{aptW("a\n"), aptT(20)}, line0 + "a\n" + nul(12)},
		{"ftruncate 6 (same size)", []string{aptT(6)}, line0},
		{"fallocate 0..100", []string{"f:0:0:100"}, line0 + nul(94)},
		{"fallocate KEEP_SIZE", []string{"f:1:0:4096"}, line0},
		{"write, fallocate 0..100, write", []string{aptW("a\n"), "f:0:0:100", aptW("b\n")}, line0 + "a\n" + nul(92) + "b\n"},
	}
	for i, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			name := fmt.Sprintf("log%d", i)
			aptFile(t, m.BackingPath(name), line0, www)
			aptFile(t, filepath.Join(twin, name), line0, www)
			ops := append(append([]string(nil), c.ops...), "c")
			if r := aptRun(t, www, filepath.Join(twin, name), ops...); r != "OK" {
				t.Fatalf("the test is wrong: on a plain file %v gives %s", ops, r)
			}
			plain, err := os.ReadFile(filepath.Join(twin, name))
			must(t, err)
			if string(plain) != c.want {
				t.Fatalf("the test is wrong: on a plain file %v leaves %q, want %q", ops, plain, c.want)
			}
			if r := aptRun(t, www, m.Path(name), ops...); r != "OK" {
				t.Fatalf("through the mount, O_APPEND then %v: %s; on a plain file OK", ops, r)
			}
			got, err := os.ReadFile(m.BackingPath(name))
			must(t, err)
			if string(got) != c.want {
				t.Errorf("through the mount, %q opened O_APPEND, then %v: the file holds %s, want %s (as on a plain file)",
					line0, ops, aptShow(got), aptShow([]byte(c.want)))
			}
			if st := advLstat(t, m.Path(name)); st.Size != int64(len(c.want)) {
				t.Errorf("stat through the mount: size %d, want %d", st.Size, len(c.want))
			}
		})
	}
	if n, used := advStagingUsage(t, m.Backing, "staging"); n != 0 {
		t.Errorf("staging holds %d files (%d bytes) after every writer closed", n, used)
	}
	if n, _ := advStagingUsage(t, m.Backing, "rejected"); n != 0 {
		t.Errorf("rejected/ holds %d files: a commit was refused", n)
	}
}

// aptRescue cuts every file in BACKING/.safefs/staging to nothing. A
// commit of today's code that is CRCing or copying a 16 TiB staging file
// then hits its end at once and fails (the bytes go to rejected/, empty),
// so the daemon's handler returns, the unmount can end and nothing fills
// the disk. Harmless when staging is empty.
func aptRescue(t testing.TB, backing string) {
	dir := filepath.Join(backing, fs.InternalDir, "staging")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size > 0 {
			err := os.Truncate(p, 0)
			t.Logf("rescue: cut staging file %s (size %d) to 0: %v", e.Name(), st.Size, err)
		}
	}
}

// aptBounded is advBounded for a daemon that may be stuck in a commit: at
// the deadline advHung saves the stacks and aborts the connection, and
// the staging files are cut (aptRescue) so that the daemon's commit fails
// at once and the test can unmount.
func aptBounded(t *testing.T, m *testfs.Mount, limit time.Duration, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
		return
	case <-time.After(limit):
	}
	advHung(t, m.Dir, what)
	aptRescue(t, m.Backing)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Errorf("%s: still not back 30 s after the connection was aborted", what)
	}
	t.FailNow()
}

// aptUsage is the disk space BACKING's files take (st_blocks*512, the
// internal directory included), walked directly, never through the mount.
func aptUsage(backing string) int64 {
	var total int64
	_ = filepath.WalkDir(backing, func(p string, d iofs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil {
			total += st.Blocks * 512
		}
		return nil
	})
	return total
}

func aptFree(t testing.TB, dir string) int64 {
	t.Helper()
	var s unix.Statfs_t
	must(t, unix.Statfs(dir, &s))
	return int64(s.Bavail) * s.Bsize
}

// aptMonitor samples BACKING's disk usage, staging usage and the free
// space of its file system until stop is called. If the free space drops
// by more than 1 GiB, or BACKING's files take more than 1 GiB, the test
// fails and the monitor aborts the connection and cuts the staging files:
// a failing run must not fill the disk.
type aptMonitor struct {
	stop                 func()
	startFree            int64
	mu                   sync.Mutex
	maxUsage, maxStaging int64
	maxStagingN          int
	freeDrop             int64
	tripped              bool
}

func aptWatch(t *testing.T, m *testfs.Mount) *aptMonitor {
	t.Helper()
	const limit = 1 << 30
	mon := &aptMonitor{startFree: aptFree(t, m.Backing)}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			usage := aptUsage(m.Backing)
			n, staging := 0, int64(0)
			if ents, err := os.ReadDir(filepath.Join(m.Backing, fs.InternalDir, "staging")); err == nil {
				n = len(ents)
				for _, e := range ents {
					var st unix.Stat_t
					if unix.Lstat(filepath.Join(m.Backing, fs.InternalDir, "staging", e.Name()), &st) == nil {
						staging += st.Blocks * 512
					}
				}
			}
			var s unix.Statfs_t
			drop := int64(0)
			if unix.Statfs(m.Backing, &s) == nil {
				drop = mon.startFree - int64(s.Bavail)*s.Bsize
			}
			mon.mu.Lock()
			mon.maxUsage = max(mon.maxUsage, usage)
			mon.maxStaging = max(mon.maxStaging, staging)
			mon.maxStagingN = max(mon.maxStagingN, n)
			mon.freeDrop = max(mon.freeDrop, drop)
			trip := !mon.tripped && (usage > limit || drop > limit)
			if trip {
				mon.tripped = true
			}
			mon.mu.Unlock()
			if trip {
				t.Errorf("disk: BACKING's files take %d bytes, the free space of its file system dropped by %d bytes (over 1 GiB; another process of the machine may have taken some): aborting the mount", usage, drop)
				advAbortFuse(t, m.Dir)
				advAbortFuse(t, m.Dir)
				aptRescue(t, m.Backing)
			}
			select {
			case <-quit:
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	mon.stop = func() {
		once.Do(func() {
			close(quit)
			<-done
		})
	}
	t.Cleanup(mon.stop)
	return mon
}

// TestAdvAppendTruncateHuge: "a lock held for hours". As www-data, open a
// 1-line file O_APPEND through the mount, ftruncate(fd, 2^44-8192), close.
// The close must be a sparse replace: bounded by a generous deadline (60 s;
// today the commit CRCs 16 TiB of zeros under the file's lock and would
// then copy them, for hours), the committed file has that size and is
// sparse, staging and BACKING's disk usage stay small throughout, and a
// second writer of the same file, started while the truncating close is in
// progress, commits (no ETIMEDOUT from a lock held by that close).
//
// A failing run ends and cleans up: at the deadline the FUSE connection is
// aborted (the writers return ENOTCONN) and the staging file is cut to
// nothing (the daemon's CRC or copy then fails at once), so the unmount
// ends; a monitor does the same at once if the disk starts to fill.
func TestAdvAppendTruncateHuge(t *testing.T) {
	m := testfs.New(t)
	www := testfs.LookupUser(t, "www-data")
	// Cleanups run last-in first-out: this one before the unmount.
	t.Cleanup(func() { aptRescue(t, m.Backing) })
	if free := aptFree(t, m.Backing); free < 2<<30 {
		t.Fatalf("only %d bytes free on BACKING's file system: not running a test that fills the disk when it fails", free)
	}
	const size = 1<<44 - 8192
	aptFile(t, m.BackingPath("log"), "line0\n", www)
	mon := aptWatch(t, m)
	t.Cleanup(func() {
		mon.stop()
		t.Logf("disk: BACKING's files took at most %d bytes, staging at most %d bytes in %d files; free space dropped by at most %d bytes",
			mon.maxUsage, mon.maxStaging, mon.maxStagingN, mon.freeDrop)
		if mon.maxStaging > advSmall || mon.maxUsage > advSmall {
			t.Errorf("disk usage during the commit: staging %d bytes, BACKING's files %d bytes; want both under %d (sparse)",
				mon.maxStaging, mon.maxUsage, advSmall)
		}
	})

	// Results are reported as they come (t.Errorf is safe from fn's
	// goroutine), so a run that hits the deadline still says what the
	// other writer got.
	aptBounded(t, m, 60*time.Second, "ftruncate(2^44-8192) on an O_APPEND descriptor, then close", func() {
		p := aptStart(t, www, 90*time.Second, m.Path("log"), aptT(size), "say:closing", "c")
		if p.waitLine("closing") {
			// The truncating close is in progress (or just done): another
			// writer of the same file.
			q := aptStart(t, www, 90*time.Second, m.Path("log"), aptW("w\n"), "c")
			if r, err := q.result(); err != nil || r != "OK" {
				t.Errorf("a concurrent O_APPEND writer of the same file, started during the truncating close: %s %v (ETIMEDOUT = %d: that close held the file's lock)",
					r, err, int(syscall.ETIMEDOUT))
			}
		}
		if r, err := p.result(); err != nil || r != "OK" {
			t.Errorf("as www-data, O_APPEND, ftruncate(fd, %d), close through the mount: %s %v", int64(size), r, err)
		}
	})
	mon.stop()
	if t.Failed() {
		return
	}

	// The committed file: size 2^44-8192 starting with "line0\n", sparse;
	// plus "w\n" if the other writer committed after the truncating close
	// (if it committed before, the replace of the whole file came last).
	st := advLstat(t, m.BackingPath("log"))
	t.Logf("committed: size %d, %d bytes on disk", st.Size, st.Blocks*512)
	if st.Size != size && st.Size != size+2 {
		t.Errorf("committed size %d, want %d (or %d with the other writer's append after it)", st.Size, int64(size), int64(size+2))
	}
	if st.Blocks*512 > advSmall {
		t.Errorf("the committed file takes %d bytes on disk: not sparse", st.Blocks*512)
	}
	f, err := os.Open(m.BackingPath("log"))
	must(t, err)
	defer f.Close()
	head := make([]byte, 8)
	_, err = f.ReadAt(head, 0)
	must(t, err)
	if string(head) != "line0\n\x00\x00" {
		t.Errorf("the committed file starts with %q, want %q", head, "line0\n\x00\x00")
	}
	tail := make([]byte, 2)
	if _, err := f.ReadAt(tail, st.Size-2); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	if st.Size == size+2 && string(tail) != "w\n" || st.Size == size && string(tail) != "\x00\x00" {
		t.Errorf("the committed file (size %d) ends with %q", st.Size, tail)
	}
	if ms := advLstat(t, m.Path("log")); ms.Size != st.Size {
		t.Errorf("stat through the mount: size %d; BACKING %d", ms.Size, st.Size)
	}
	if n, used := advStagingUsage(t, m.Backing, "staging"); n != 0 || used > advSmall {
		t.Errorf("after the commits, staging holds %d files, %d bytes", n, used)
	}
	if n, used := advStagingUsage(t, m.Backing, "rejected"); n != 0 {
		t.Errorf("rejected/ holds %d files (%d bytes): a commit was refused", n, used)
	}
	if u := aptUsage(m.Backing); u > advSmall {
		t.Errorf("after the commits BACKING's files take %d bytes", u)
	}
}
