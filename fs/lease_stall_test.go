package fs_test

// Leases taken directly in BACKING (security round 3, item 4). A user
// may take a lease (fcntl F_SETLEASE) on any file it owns; an open that
// conflicts with it waits in the kernel until the holder gives it up or
// lease-break-time (45 s) has passed. The daemon opens backing files as
// root on behalf of every caller: a www-data process that takes a lease
// on its own file in BACKING, and ignores the signal that asks it to give
// the lease up, must not make root's requests through the mount wait,
// hold a directory's lock meanwhile, or cost the daemon an OS thread per
// open.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/testfs"
)

// leaseGuard bounds each request of these tests: only a guard against a
// hang (a blocked open waits lease-break-time, 45 s by default).
const leaseGuard = 20 * time.Second

// leaseHoldPerl opens ARGV[0] read-only, takes a lease on it (F_SETLEASE
// is 1024; ARGV[1] 0 for a read lease, 1 for a write lease), ignores
// SIGIO (the signal the kernel sends to ask for it back) unless ARGV[2]
// is "yield" (then it gives the lease back, F_UNLCK, when asked), says
// "leased" and holds it until its stdin closes.
const leaseHoldPerl = `
use strict; use Fcntl;
my ($path, $type, $yield) = @ARGV;
sysopen(my $fh, $path, O_RDONLY) or die "open $path: $!\n";
$SIG{IO} = ($yield // '') eq 'yield' ? sub { fcntl($fh, 1024, 2) } : 'IGNORE';
fcntl($fh, 1024, $type + 0) or die "F_SETLEASE: $!\n";
$| = 1;
print "leased\n";
my $line = <STDIN>;
`

// leaseOpPerl makes one request and prints "OK [detail]" or "ERR errno":
//
//	read PATH      open O_RDONLY, read
//	append PATH    open O_WRONLY|O_APPEND|O_CREAT, write "x\n", close
//	touch PATH     open O_WRONLY|O_CREAT, close
//	ls DIR         opendir, readdir
//	many N PATH    N processes each open PATH O_RDONLY at once; the
//	               detail counts their results by errno ("0=12,11=188")
const leaseOpPerl = `
use strict; use Fcntl; use POSIX ();
my ($op, @a) = @ARGV; my ($f, $ok); my $d = "";
if ($op eq 'read') { my $b; $ok = sysopen($f, $a[0], O_RDONLY) && defined(sysread($f, $b, 4096)); }
elsif ($op eq 'append') { $ok = sysopen($f, $a[0], O_WRONLY|O_APPEND|O_CREAT, 0644) && defined(syswrite($f, "x\n")) && close($f); }
elsif ($op eq 'touch') { $ok = sysopen($f, $a[0], O_WRONLY|O_CREAT, 0644) && close($f); }
elsif ($op eq 'ls') { $ok = opendir($f, $a[0]); if ($ok) { my @e = readdir($f); $ok = @e > 0; } }
elsif ($op eq 'many') {
  my ($n, $p) = @a; my @kids;
  for (1..$n) {
    my $pid = fork(); die "fork: $!\n" unless defined $pid;
    if (!$pid) { my $g; my $r = sysopen($g, $p, O_RDONLY) ? 0 : $!+0; POSIX::_exit($r); }
    push @kids, $pid;
  }
  my %c; for (@kids) { waitpid($_, 0); $c{$? >> 8}++; }
  $ok = 1; $d = join(",", map { "$_=$c{$_}" } sort keys %c);
}
else { die "unknown op $op\n"; }
if ($ok) { print "OK $d\n"; } else { print "ERR " . ($!+0) . "\n"; }
`

// leaseHolder is a process holding a lease on a backing file.
type leaseHolder struct {
	path  string
	ino   uint64
	dev   uint64
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
	once  sync.Once
}

// leaseHold starts a process as c that takes a lease (write or read) on
// path, a file in BACKING, and returns once it holds it. It is ended in
// cleanup, before the mount (cleanups run last registered first), so no
// request through the mount stays blocked on it.
func leaseHold(t *testing.T, c testfs.Cred, path string, write bool) *leaseHolder {
	t.Helper()
	return leaseHoldAs(t, c, path, write, "keep")
}

// leaseHoldAs is leaseHold; how is "yield" for a holder that gives its
// lease back when the kernel asks.
func leaseHoldAs(t *testing.T, c testfs.Cred, path string, write bool, how string) *leaseHolder {
	t.Helper()
	st := advLstat(t, path)
	typ := "0"
	if write {
		typ = "1"
	}
	cmd := exec.Command("perl", "-e", leaseHoldPerl, path, typ, how)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	testfs.AsUser(cmd, c)
	stdin, err := cmd.StdinPipe()
	must(t, err)
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	var errb syncBuffer // read while it runs
	cmd.Stderr = &errb
	must(t, cmd.Start())
	h := &leaseHolder{path: path, ino: st.Ino, dev: uint64(st.Dev), cmd: cmd, stdin: stdin, done: make(chan struct{})}
	t.Cleanup(h.end)
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "leased" {
		h.end()
		t.Fatalf("the lease holder did not take its lease on %s: %q %s", path, line, errb.String())
	}
	if _, ok := h.held(); !ok {
		t.Fatalf("the lease holder says it holds a lease on %s, /proc/locks does not show it", path)
	}
	return h
}

// end ends the holder (its lease with it) and waits for it.
func (h *leaseHolder) end() {
	h.once.Do(func() {
		h.stdin.Close()
		_ = h.cmd.Process.Kill()
		_ = h.cmd.Wait()
		close(h.done)
	})
}

// held returns the /proc/locks line of the holder's lease, if it still
// holds it (active, or being broken: the kernel has not taken it back).
func (h *leaseHolder) held() (string, bool) {
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		return "", false
	}
	pid := strconv.Itoa(h.cmd.Process.Pid)
	file := fmt.Sprintf("%02x:%02x:%d", unix.Major(h.dev), unix.Minor(h.dev), h.ino)
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 6 && f[1] == "LEASE" && f[4] == pid && f[5] == file {
			return l, true
		}
	}
	return "", false
}

// leaseResult is what one leaseOpPerl run printed.
type leaseResult struct {
	errno  syscall.Errno
	detail string
	err    error // the run itself failed
}

// leaseStart starts leaseOpPerl as c (nil: root); wait returns its result.
// A run still going after leaseGuard fails the test: the holders are then
// ended, which lets the request go on, and the run is waited for.
func leaseStart(t *testing.T, c *testfs.Cred, holders []*leaseHolder, args ...string) (wait func() leaseResult) {
	t.Helper()
	cmd := exec.Command("perl", append([]string{"-e", leaseOpPerl}, args...)...)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	if c != nil {
		testfs.AsUser(cmd, *c)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	must(t, cmd.Start())
	guard := time.NewTimer(leaseGuard) // from the start: runs overlap
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	return func() leaseResult {
		t.Helper()
		defer guard.Stop()
		var err error
		select {
		case err = <-done:
		case <-guard.C:
			t.Errorf("%q did not finish within %v while www-data held its lease (it is ended now)", args, leaseGuard)
			for _, h := range holders {
				h.end()
			}
			select {
			case err = <-done:
			case <-time.After(leaseGuard):
				_ = cmd.Process.Kill()
				err = <-done
			}
			return leaseResult{err: fmt.Errorf("hung: %v", err)}
		}
		line := strings.TrimSpace(out.String())
		switch {
		case err != nil:
			return leaseResult{err: fmt.Errorf("%v: %s%s", err, line, errb.String())}
		case strings.HasPrefix(line, "OK"):
			return leaseResult{detail: strings.TrimSpace(strings.TrimPrefix(line, "OK"))}
		case strings.HasPrefix(line, "ERR "):
			n, err := strconv.Atoi(strings.TrimPrefix(line, "ERR "))
			if err != nil {
				return leaseResult{err: fmt.Errorf("bad output %q", line)}
			}
			return leaseResult{errno: syscall.Errno(n)}
		}
		return leaseResult{err: fmt.Errorf("bad output %q %s", line, errb.String())}
	}
}

// leaseCheck fails t unless the request finished with success or EAGAIN
// (the documented answer while another process's lease is in the way),
// and the holder still held its lease after it: it finished because the
// daemon did not wait for the lease, not because the lease went.
func leaseCheck(t *testing.T, what string, r leaseResult, h *leaseHolder) {
	t.Helper()
	if r.err != nil {
		t.Errorf("%s: %v", what, r.err)
		return
	}
	t.Logf("%s: errno %d (%v) %s", what, int(r.errno), r.errno, r.detail)
	if r.errno != 0 && r.errno != syscall.EAGAIN {
		t.Errorf("%s: %v, want success or EAGAIN", what, r.errno)
	}
	if l, ok := h.held(); ok {
		t.Logf("after it: %s", l)
	} else {
		t.Errorf("%s: the lease on %s was gone when it finished: it did not finish while the lease was held", what, h.path)
	}
}

// leaseThreads is this process's thread count (/proc/self/status): the
// in-process daemon's threads among them.
func leaseThreads(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	must(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			must(t, err)
			return n
		}
	}
	t.Fatal("no Threads line in /proc/self/status")
	return 0
}

// TestAdvLeaseStallsNoOne: www-data holds leases on its own files directly
// in BACKING and ignores the kernel's request to give them up. Root's
// read, append and O_CREAT open of such a file through the mount, and
// listings and creates in its directory meanwhile, all finish while the
// lease is still held (with success or EAGAIN), and 200 opens of a
// leased file at once do not cost the daemon a thread each.
func TestAdvLeaseStallsNoOne(t *testing.T) {
	www := testfs.LookupUser(t, "www-data")
	p := advNewDirs(t)
	must(t, os.Mkdir(p.bpath("d"), 0o755))
	must(t, os.Chown(p.bpath("d"), int(www.Uid), int(www.Gid)))
	for _, nm := range []string{"r", "a", "w", "m", "y"} {
		must(t, os.WriteFile(p.bpath("d", nm), []byte("www-data's\n"), 0o644))
		must(t, os.Chown(p.bpath("d", nm), int(www.Uid), int(www.Gid)))
	}
	must(t, p.mount(t))

	t.Run("read of a write-leased file", func(t *testing.T) {
		h := leaseHold(t, www, p.bpath("d", "r"), true)
		r := leaseStart(t, nil, []*leaseHolder{h}, "read", p.path("d", "r"))()
		leaseCheck(t, "root's read", r, h)
	})
	t.Run("append to a read-leased file", func(t *testing.T) {
		h := leaseHold(t, www, p.bpath("d", "a"), false)
		r := leaseStart(t, nil, []*leaseHolder{h}, "append", p.path("d", "a"))()
		leaseCheck(t, "root's append", r, h)
		h.end()
		b, err := os.ReadFile(p.bpath("d", "a"))
		must(t, err)
		if want := "www-data's\n"; r.err != nil {
			// Failed above.
		} else if r.errno == 0 {
			want += "x\n"
			if string(b) != want {
				t.Errorf("the append succeeded: the file holds %q, want %q", b, want)
			}
		} else if string(b) != want {
			t.Errorf("the append failed: the file holds %q, want %q as before", b, want)
		}
	})
	t.Run("append to a write-leased file", func(t *testing.T) {
		h := leaseHold(t, www, p.bpath("d", "w"), true)
		r := leaseStart(t, nil, []*leaseHolder{h}, "append", p.path("d", "w"))()
		leaseCheck(t, "root's append", r, h)
	})
	t.Run("O_CREAT open, listings and creates meanwhile", func(t *testing.T) {
		// Looked up while absent first, so that the kernel may send the
		// open as a CREATE, under the directory's lock.
		if _, err := os.Stat(p.path("d", "c")); !os.IsNotExist(err) {
			t.Fatalf("stat of d/c before it exists: %v", err)
		}
		must(t, os.WriteFile(p.bpath("d", "c"), []byte("www-data's\n"), 0o644))
		must(t, os.Chown(p.bpath("d", "c"), int(www.Uid), int(www.Gid)))
		h := leaseHold(t, www, p.bpath("d", "c"), true)
		hs := []*leaseHolder{h}
		creat := leaseStart(t, nil, hs, "append", p.path("d", "c"))
		ls := leaseStart(t, nil, hs, "ls", p.path("d"))
		touch := leaseStart(t, nil, hs, "touch", p.path("d", "other"))
		top := leaseStart(t, nil, hs, "ls", p.Dir)
		leaseCheck(t, "root's O_CREAT|O_APPEND open", creat(), h)
		for _, c := range []struct {
			what string
			r    leaseResult
		}{{"root's ls of the directory", ls()}, {"root's touch in the directory", touch()}, {"root's ls of the mount's top", top()}} {
			if c.r.err != nil || c.r.errno != 0 {
				t.Errorf("%s: %v %v, want success", c.what, c.r.err, c.r.errno)
			}
		}
		if _, ok := h.held(); !ok {
			t.Errorf("the lease on d/c was gone by the end of the listings")
		}
	})
	t.Run("a holder that gives its lease back", func(t *testing.T) {
		// The open is waited for and goes on: it reads the file.
		h := leaseHoldAs(t, www, p.bpath("d", "y"), true, "yield")
		r := leaseStart(t, nil, []*leaseHolder{h}, "read", p.path("d", "y"))()
		if r.err != nil || r.errno != 0 {
			t.Errorf("root's read of a file whose holder gives its lease back when asked: %v %v, want success", r.err, r.errno)
		}
		if l, ok := h.held(); ok {
			t.Errorf("the holder was asked for its lease and gave it back, yet /proc/locks shows %s", l)
		}
	})
	t.Run("200 opens at once", func(t *testing.T) {
		h := leaseHold(t, www, p.bpath("d", "m"), true)
		before := leaseThreads(t)
		peak := before
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			for {
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
				if n := leaseThreads(t); n > peak {
					peak = n
				}
			}
		}()
		r := leaseStart(t, &www, []*leaseHolder{h}, "many", "200", p.path("d", "m"))()
		close(stop)
		<-sampled
		leaseCheck(t, "200 opens by www-data", r, h)
		t.Logf("threads: %d before, at most %d during the opens", before, peak)
		if peak-before >= 100 {
			t.Errorf("the daemon's thread count rose from %d to %d during 200 opens of a leased file: a thread per blocked open", before, peak)
		}
	})
}
