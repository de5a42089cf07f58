package fs_test

// Helpers of the adversarial suite (adversarial_*_test.go): a sentinel
// directory outside BACKING whose every byte, mode, owner, time and name
// is compared before and after an attack; a tiny Perl "op" runner that
// performs one system call as another user and reports its errno; and a
// mount over a backing directory prepared by the test.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/internal/mountinfo"
	"github.com/safefs/safefs/testfs"
)

// advEntry is everything observable about one entry of a sentinel tree.
type advEntry struct {
	Mode       uint32
	Uid, Gid   uint32
	Size       int64
	Nlink      uint64
	Ino        uint64
	Atime      unix.Timespec // reads of files and listings of directories move it (see advSentinel)
	Mtime      unix.Timespec
	Ctime      unix.Timespec // chmod, chown, link, rename, write all move it
	Link       string        // symlink target
	Sum        string        // sha256 of regular file contents
	Xattrs     string
	Dents      string // directory entries, sorted
	Unreadable string // why Sum/Dents could not be taken
}

// advSnapshot walks root without following symlinks and without touching
// atimes (O_NOATIME: we are root, so allowed), and describes every entry.
func advSnapshot(t testing.TB, root string) map[string]advEntry {
	t.Helper()
	out := map[string]advEntry{}
	var walk func(rel string)
	walk = func(rel string) {
		p := filepath.Join(root, rel)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Fatalf("snapshot lstat %s: %v", p, err)
		}
		e := advEntry{Mode: st.Mode, Uid: st.Uid, Gid: st.Gid, Size: st.Size, Nlink: uint64(st.Nlink), Ino: st.Ino,
			Atime: st.Atim, Mtime: st.Mtim, Ctime: st.Ctim}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			l, err := os.Readlink(p)
			if err != nil {
				t.Fatalf("snapshot readlink %s: %v", p, err)
			}
			e.Link = l
			e.Atime = unix.Timespec{} // our own readlink moves a symlink's atime
		case unix.S_IFREG:
			fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOATIME|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
			if err != nil {
				e.Unreadable = err.Error()
				break
			}
			f := os.NewFile(uintptr(fd), p)
			h := sha256.New()
			buf := make([]byte, 64<<10)
			for {
				n, err := f.Read(buf)
				h.Write(buf[:n])
				if err != nil {
					break
				}
			}
			f.Close()
			e.Sum = hex.EncodeToString(h.Sum(nil))
		case unix.S_IFDIR:
			fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOATIME|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				e.Unreadable = err.Error()
				break
			}
			f := os.NewFile(uintptr(fd), p)
			names, err := f.Readdirnames(-1)
			f.Close()
			if err != nil {
				e.Unreadable = err.Error()
				break
			}
			sort.Strings(names)
			e.Dents = strings.Join(names, "\x00")
			defer func() {
				for _, n := range names {
					walk(filepath.Join(rel, n))
				}
			}()
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK {
			if sz, err := unix.Llistxattr(p, nil); err == nil && sz > 0 {
				buf := make([]byte, sz)
				if sz, err = unix.Llistxattr(p, buf); err == nil {
					e.Xattrs = string(buf[:sz])
				}
			}
		}
		out[rel] = e
	}
	walk(".")
	return out
}

// advSameTree fails the test for every difference between two snapshots.
func advSameTree(t testing.TB, what string, before, after map[string]advEntry) {
	t.Helper()
	for k, b := range before {
		a, ok := after[k]
		if !ok {
			t.Errorf("%s: %s disappeared", what, k)
			continue
		}
		if a != b {
			t.Errorf("%s: %s changed:\n before %+v\n after  %+v", what, k, b, a)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			t.Errorf("%s: %s appeared", what, k)
		}
	}
}

// advSentinel makes a directory outside every BACKING of the test, with
// files, a subdirectory, a symlink and a FIFO, every atime set far
// before its mtime so that (relatime or not) any read of a file or
// listing of a directory moves it. The directory is root's and 0700, so
// that another user's own path resolution cannot reach it: whatever
// changes in it was done by the daemon (root).
func advSentinel(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "sentinel")
	must(t, os.Mkdir(dir, 0o700))
	must(t, os.Chmod(dir, 0o700))
	must(t, os.WriteFile(filepath.Join(dir, "x"), []byte("sentinel x\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "passwd"), []byte("root:x:0:0::/root:/bin/sh\n"), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "f"), bytes.Repeat([]byte("S"), 10000), 0o666))
	must(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "sub", "y"), []byte("sentinel y\n"), 0o640))
	must(t, os.Symlink("x", filepath.Join(dir, "lnk")))
	must(t, unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600))
	for _, p := range []string{"x", "passwd", "f", "sub/y", "sub", "fifo", "."} {
		ts := []unix.Timespec{{Sec: 1_000_000_000}, {Sec: 1_500_000_000}}
		must(t, unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(dir, p), ts, unix.AT_SYMLINK_NOFOLLOW))
	}
	return dir
}

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

// advMounted reports whether dir is a mount point in /proc/self/mounts,
// and with which options.
func advMounted(t testing.TB, dir string) (string, bool) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 4 && mountinfo.Unescape(f[1]) == dir {
			return f[3], true
		}
	}
	return "", false
}

// advHung is called when a request through an in-process mount did not
// come back within its deadline: it saves every goroutine's stack (the
// daemon's among them) to the test log and a file, then aborts the FUSE
// connection of dir so that the stuck threads return (ENOTCONN) and the
// test process can still end and unmount.
func advHung(t testing.TB, dir, what string) {
	t.Helper()
	buf := make([]byte, 8<<20)
	n := runtime.Stack(buf, true)
	f := filepath.Join(os.TempDir(), fmt.Sprintf("adv-hang-%d.txt", time.Now().UnixNano()))
	_ = os.WriteFile(f, buf[:n], 0o644)
	t.Errorf("%s: no answer within the deadline (daemon hung); goroutines saved in %s", what, f)
	// Kernel stacks of this process's blocked threads, for the report.
	tasks, _ := filepath.Glob("/proc/self/task/*")
	for _, task := range tasks {
		w, _ := os.ReadFile(task + "/wchan")
		switch string(w) {
		case "", "0", "futex_do_wait", "do_epoll_wait", "hrtimer_nanosleep", "fuse_dev_do_read", "do_wait":
			continue
		}
		st, _ := os.ReadFile(task + "/stack")
		t.Logf("thread %s blocked in %s:\n%s", filepath.Base(task), w, firstN(string(st), 8))
	}
	advAbortFuse(t, dir)
}

func firstN(s string, n int) string {
	l := strings.Split(s, "\n")
	if len(l) > n {
		l = l[:n]
	}
	return strings.Join(l, "\n")
}

// advCombined runs cmd (made with execCmd under ctx) and returns its
// combined output. If ctx ends first, the daemon is taken as hung:
// advHung saves the evidence and aborts the connection of dir, which
// frees a subprocess stuck in an uninterruptible FUSE request, and
// advCombined then waits for the subprocess and reports hung.
func advCombined(t testing.TB, ctx context.Context, dir, what string, cmd *exec.Cmd) ([]byte, error, bool) {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, err, false
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if ctx.Err() == nil {
			return out.Bytes(), err, false
		}
	case <-ctx.Done():
	}
	advHung(t, dir, what)
	err := <-done
	return out.Bytes(), err, true
}

// advAbortFuse aborts the FUSE connection mounted on dir (found by its
// device number in /proc/self/mountinfo, never by stat, which would hang)
// through fusectl, or where fusectl is not mounted, by a forced unmount
// of dir (which aborts the connection too).
func advAbortFuse(t testing.TB, dir string) {
	t.Helper()
	ms, err := mountinfo.Read(mountinfo.Self)
	if err != nil {
		t.Error(err)
		return
	}
	for _, m := range ms {
		if m.Point != dir {
			continue
		}
		_, minor, ok := strings.Cut(m.Dev, ":")
		if !ok {
			continue
		}
		err := os.WriteFile("/sys/fs/fuse/connections/"+minor+"/abort", []byte("1"), 0o200)
		t.Logf("aborted FUSE connection %s of %s: %v", minor, dir, err)
		if err == nil {
			return
		}
	}
	err = unix.Unmount(dir, unix.MNT_FORCE)
	t.Logf("umount(%s, MNT_FORCE) to abort the connection: %v", dir, err)
}

// advJournalLine frames v as one journal line, as journal.encodeLine does
// (unexported): 8 lowercase hex digits of the crc32c (Castagnoli) of the
// JSON, a space, the JSON, a newline. So the checksum is valid and only
// the content can be refused.
func advJournalLine(t testing.TB, v any) []byte {
	t.Helper()
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Appendf(nil, "%08x %s\n", crc32.Checksum(js, crc32.MakeTable(crc32.Castagnoli)), js)
}

// advPrepared is a safefs mounted over a backing directory that the test
// prepared (testfs.New always starts from an empty one).
type advPrepared struct {
	Backing, Dir string
	srv          *fs.Server
}

// advNewDirs makes an empty backing directory and mount point that other
// users can reach (t.TempDir is 0700).
func advNewDirs(t testing.TB) *advPrepared {
	t.Helper()
	testfs.Available(t)
	root := t.TempDir()
	for _, d := range []string{root, filepath.Dir(root)} {
		must(t, os.Chmod(d, 0o755))
	}
	p := &advPrepared{Backing: filepath.Join(root, "orig"), Dir: filepath.Join(root, "mnt")}
	must(t, os.Mkdir(p.Backing, 0o755))
	must(t, os.Mkdir(p.Dir, 0o755))
	return p
}

// mount mounts safefs over p.Backing; the error is returned, not fatal.
func (p *advPrepared) mount(t testing.TB, edit ...func(*fs.Options)) error {
	t.Helper()
	o := fs.DefaultOptions()
	o.AllowOther = os.Geteuid() == 0
	o.Log = zaptest.NewLogger(t)
	testfs.OptionsFromEnv(&o)
	for _, e := range edit {
		e(&o)
	}
	srv, err := fs.Mount(p.Backing, p.Dir, o)
	if err != nil {
		return err
	}
	p.srv = srv
	t.Cleanup(func() { p.unmount(t) })
	return nil
}

func (p *advPrepared) unmount(t testing.TB) {
	if p.srv == nil {
		return
	}
	srv := p.srv
	p.srv = nil
	if err := srv.Unmount(); err != nil {
		t.Errorf("unmount %s: %v", p.Dir, err)
	}
}

func (p *advPrepared) path(names ...string) string {
	return filepath.Join(append([]string{p.Dir}, names...)...)
}

func (p *advPrepared) bpath(names ...string) string {
	return filepath.Join(append([]string{p.Backing}, names...)...)
}

// advStagingUsage returns the number of entries and the allocated bytes
// (st_blocks*512) of the regular files in BACKING/.safefs/<sub>.
func advStagingUsage(t testing.TB, backing, sub string) (int, int64) {
	t.Helper()
	dir := filepath.Join(backing, fs.InternalDir, sub)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, e := range ents {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dir, e.Name()), &st); err == nil {
			total += st.Blocks * 512
		}
	}
	return len(ents), total
}

// advLstat is unix.Lstat that fails the test.
func advLstat(t testing.TB, p string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatalf("lstat %s: %v", p, err)
	}
	return st
}
