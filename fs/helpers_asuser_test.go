package fs_test

// A tiny Perl "op" runner that performs one system call as another user
// and reports its errno.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/safefs/safefs/testfs"
)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// advPerlOp performs one system call in Perl and prints "OK [detail]" or
// "ERR <errno>". Ops:
//
//	read PATH                    open O_RDONLY and read
//	readall PATH                 open O_RDONLY, print the contents in hex
//	write PATH TEXT              open O_WRONLY|O_CREAT|O_TRUNC 0666, write, close
//	wronly PATH TEXT             open O_WRONLY (no create, no trunc), write, close
//	trunc PATH                   open O_WRONLY|O_TRUNC, close
//	create PATH MODE             open O_WRONLY|O_CREAT|O_EXCL MODE, close
//	mkdir PATH MODE
//	mkfifo PATH MODE
//	symlink TARGET PATH
//	link OLD NEW
//	rename OLD NEW
//	unlink PATH
//	rmdir PATH
//	chmod PATH MODE
//	chown PATH UID GID
//	utime PATH
//	setxattr PATH NAME VALUE
//	opennb PATH                  open O_WRONLY|O_NONBLOCK, close
//	openw PATH                   open O_WRONLY (blocking), close
//	stat PATH                    prints "OK uid gid mode"
//
// $ENV{UMASK}, when set, is the umask (octal).
const advPerlOp = `
use strict; use Fcntl; use POSIX ();
umask(oct($ENV{UMASK})) if defined $ENV{UMASK};
my ($op, @a) = @ARGV; my $f;
my $ok; my $detail = "";
if ($op eq 'read') { my $b; $ok = sysopen($f, $a[0], O_RDONLY) && defined(sysread($f, $b, 4096)); }
elsif ($op eq 'readall') { my $b = ""; $ok = sysopen($f, $a[0], O_RDONLY);
  if ($ok) { local $/; $b = <$f>; $b = "" unless defined $b; $ok = close($f); $detail = unpack("H*", $b); } }
elsif ($op eq 'write') { $ok = sysopen($f, $a[0], O_WRONLY|O_CREAT|O_TRUNC, 0666) && defined(syswrite($f, $a[1])) && close($f); }
elsif ($op eq 'wronly') { $ok = sysopen($f, $a[0], O_WRONLY) && defined(syswrite($f, $a[1])) && close($f); }
elsif ($op eq 'trunc') { $ok = sysopen($f, $a[0], O_WRONLY|O_TRUNC) && close($f); }
elsif ($op eq 'create') { $ok = sysopen($f, $a[0], O_WRONLY|O_CREAT|O_EXCL, oct($a[1])) && close($f); }
elsif ($op eq 'mkdir') { $ok = mkdir($a[0], oct($a[1])); }
elsif ($op eq 'mkfifo') { $ok = POSIX::mkfifo($a[0], oct($a[1])); }
elsif ($op eq 'symlink') { $ok = symlink($a[0], $a[1]); }
elsif ($op eq 'link') { $ok = link($a[0], $a[1]); }
elsif ($op eq 'rename') { $ok = rename($a[0], $a[1]); }
elsif ($op eq 'unlink') { $ok = unlink($a[0]); }
elsif ($op eq 'rmdir') { $ok = rmdir($a[0]); }
elsif ($op eq 'chmod') { $ok = chmod(oct($a[1]), $a[0]); }
elsif ($op eq 'chown') { $ok = chown($a[1], $a[2], $a[0]); }
elsif ($op eq 'utime') { $ok = utime(1, 1, $a[0]); }
elsif ($op eq 'setxattr') { $ok = (syscall(188, $a[0], $a[1], $a[2], length($a[2]), 0) == 0); }
elsif ($op eq 'opennb') { $ok = sysopen($f, $a[0], O_WRONLY|O_NONBLOCK) && close($f); }
elsif ($op eq 'openw') { $ok = sysopen($f, $a[0], O_WRONLY) && close($f); }
elsif ($op eq 'stat') { my @s = lstat($a[0]); $ok = @s > 0; $detail = sprintf("%d %d %o", $s[4], $s[5], $s[2]) if $ok; }
else { die "unknown op $op\n"; }
if ($ok) { print "OK $detail\n"; } else { print "ERR " . ($!+0) . "\n"; }
`

// advOpResult is what one advPerlOp run printed.
type advOpResult struct {
	Errno  syscall.Errno // 0: OK
	Detail string
}

// advRun runs advPerlOp as c (nil: root) with umask ("": inherited),
// bounded by limit. A subprocess killed by the limit is an error.
func advRun(t testing.TB, c *testfs.Cred, umask string, limit time.Duration, args ...string) (advOpResult, error) {
	t.Helper()
	wait, err := advStart(t, c, umask, limit, args...)
	if err != nil {
		return advOpResult{}, err
	}
	return wait()
}

// advStart starts advPerlOp; it returns once the process runs Perl (the
// exec is done), so that no descriptor of this process is closed by the
// child's exec later. wait collects the result.
func advStart(t testing.TB, c *testfs.Cred, umask string, limit time.Duration, args ...string) (wait func() (advOpResult, error), err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	cmd := exec.CommandContext(ctx, "perl", append([]string{"-e", advPerlOp}, args...)...)
	cmd.WaitDelay = 2 * time.Second
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	if umask != "" {
		cmd.Env = append(cmd.Env, "UMASK="+umask)
	}
	if c != nil {
		testfs.AsUser(cmd, *c)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, err
	}
	return func() (advOpResult, error) {
		defer cancel()
		err := cmd.Wait()
		if ctx.Err() != nil {
			return advOpResult{}, fmt.Errorf("perl %q: killed after %v (hung)", args, limit)
		}
		if err != nil {
			return advOpResult{}, fmt.Errorf("perl %q: %v: %s%s", args, err, out.String(), errb.String())
		}
		line := strings.TrimSpace(out.String())
		switch {
		case strings.HasPrefix(line, "OK"):
			return advOpResult{Detail: strings.TrimSpace(strings.TrimPrefix(line, "OK"))}, nil
		case strings.HasPrefix(line, "ERR "):
			n, err := strconv.Atoi(strings.TrimPrefix(line, "ERR "))
			if err != nil {
				return advOpResult{}, fmt.Errorf("perl %q: bad output %q", args, line)
			}
			return advOpResult{Errno: syscall.Errno(n)}, nil
		}
		return advOpResult{}, fmt.Errorf("perl %q: bad output %q %s", args, line, errb.String())
	}, nil
}

// advOp is advRun with a 30 s limit that fails the test on a hang.
func advOp(t testing.TB, c *testfs.Cred, umask string, args ...string) advOpResult {
	t.Helper()
	r, err := advRun(t, c, umask, 30*time.Second, args...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// execCmd is exec.CommandContext that gives up waiting for output soon
// after ctx kills the process.
func execCmd(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = 2 * time.Second
	cmd.Dir = "/"
	return cmd
}

// advErrno extracts the errno of err (0 for nil, -1 if none).
func advErrno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return ^syscall.Errno(0)
}
