package fs_test

// Metadata and link requests must act on the caller's file, never on
// whatever is at its name now. BACKING belongs to www-data (a common
// deployment), so www-data can rename a root-owned file of BACKING onto
// the name of its own file while it holds a descriptor of that file, or
// while the kernel still caches the name (1 s). fchmod, fchown,
// futimens, the xattr calls and link then reach the daemon for
// www-data's logical file; if the daemon finds the backing inode by
// name, it changes root's file as root.

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	iofs "io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/testfs"
)

// swpShellScript is a long-lived Perl process that runs one system call
// per line of stdin (fields separated by tabs) and answers each with one
// line, "OK [detail]" or "ERR <errno>" (a newline in an argument is sent
// as backslash-n). Descriptors opened by "open" are
// kept under a name until "close", so they are held across whatever the
// test does in between (a swap directly in BACKING). x86_64 syscall
// numbers: 189 lsetxattr, 190 fsetxattr, 192 lgetxattr, 193 fgetxattr,
// 195 llistxattr, 196 flistxattr, 198 lremovexattr, 199 fremovexattr,
// 265 linkat.
//
//	open NAME PATH FLAGS MODE   sysopen with numeric FLAGS, octal MODE
//	close NAME                  close(2): its error is the commit's
//	write NAME TEXT             syswrite on the held descriptor
//	ftruncate NAME LEN
//	fchmod NAME MODE | fchown NAME UID GID | futime NAME (times 1000)
//	fsetxattr NAME ATTR VALUE | fgetxattr NAME ATTR (hex) | flistxattr NAME
//	fremovexattr NAME ATTR
//	linkfd NAME NEWPATH         linkat("/proc/self/fd/N", NEWPATH, AT_SYMLINK_FOLLOW)
//	stat PATH                   "uid gid mode(octal) ino"
//	rename OLD NEW | link OLD NEW | symlink TARGET PATH | unlink PATH
//	mkdir PATH MODE | mkfifo PATH MODE
//	chmod PATH MODE | chown PATH UID GID | utime PATH (times 1000)
//	truncate PATH LEN
//	writepath PATH TEXT         open O_WRONLY|O_CREAT|O_TRUNC 0666, write, close
//	rewrite PATH TEXT           open O_WRONLY|O_TRUNC (no create), write, close
//	setxattr PATH ATTR VALUE | getxattr PATH ATTR (hex) | removexattr PATH ATTR
//	listxattr PATH              names joined with ","
//	listxattrsize PATH          llistxattr(PATH, NULL, 0)
const swpShellScript = `
use strict; use Fcntl; use POSIX ();
$| = 1;
umask(oct($ENV{UMASK})) if defined $ENV{UMASK};
my %fh;
sub names { my ($b, $n) = @_; return join(",", grep { length } split(/\0/, substr($b, 0, $n))); }
print "READY\n";
while (defined(my $line = <STDIN>)) {
  chomp $line;
  my ($op, @a) = split /\t/, $line, -1;
  s/\\n/\n/g for @a;
  my ($ok, $detail) = (0, "");
  my $f = (@a && exists $fh{$a[0]}) ? $fh{$a[0]} : undef;
  my $h;
  $! = 0;
  if ($op eq 'open') { $ok = sysopen($h, $a[1], $a[2]+0, oct($a[3])); $fh{$a[0]} = $h if $ok; }
  elsif ($op eq 'close') { $ok = close($f); delete $fh{$a[0]}; }
  elsif ($op eq 'write') { $ok = defined(syswrite($f, $a[1])); }
  elsif ($op eq 'ftruncate') { $ok = truncate($f, $a[1]); }
  elsif ($op eq 'fchmod') { $ok = chmod(oct($a[1]), $f); }
  elsif ($op eq 'fchown') { $ok = chown($a[1], $a[2], $f); }
  elsif ($op eq 'futime') { $ok = utime(1000, 1000, $f); }
  elsif ($op eq 'fsetxattr') { $ok = syscall(190, fileno($f), $a[1], $a[2], length($a[2]), 0) == 0; }
  elsif ($op eq 'fgetxattr') { my $b = "\0" x 65536; my $n = syscall(193, fileno($f), $a[1], $b, 65536);
    $ok = $n >= 0; $detail = unpack("H*", substr($b, 0, $n)) if $ok; }
  elsif ($op eq 'flistxattr') { my $b = "\0" x 65536; my $n = syscall(196, fileno($f), $b, 65536);
    $ok = $n >= 0; $detail = names($b, $n) if $ok; }
  elsif ($op eq 'fremovexattr') { $ok = syscall(199, fileno($f), $a[1]) == 0; }
  elsif ($op eq 'linkfd') { $ok = syscall(265, -100, "/proc/self/fd/" . fileno($f), -100, $a[1], 0x400) == 0; }
  elsif ($op eq 'stat') { my @s = lstat($a[0]); $ok = @s > 0; $detail = sprintf("%d %d %o %d", $s[4], $s[5], $s[2], $s[1]) if $ok; }
  elsif ($op eq 'rename') { $ok = rename($a[0], $a[1]); }
  elsif ($op eq 'link') { $ok = link($a[0], $a[1]); }
  elsif ($op eq 'symlink') { $ok = symlink($a[0], $a[1]); }
  elsif ($op eq 'unlink') { $ok = unlink($a[0]); }
  elsif ($op eq 'mkdir') { $ok = mkdir($a[0], oct($a[1])); }
  elsif ($op eq 'mkfifo') { $ok = POSIX::mkfifo($a[0], oct($a[1])); }
  elsif ($op eq 'chmod') { $ok = chmod(oct($a[1]), $a[0]); }
  elsif ($op eq 'chown') { $ok = chown($a[1], $a[2], $a[0]); }
  elsif ($op eq 'utime') { $ok = utime(1000, 1000, $a[0]); }
  elsif ($op eq 'truncate') { my $p = $a[0]; $ok = truncate($p, $a[1]); }
  elsif ($op eq 'writepath') { $ok = sysopen($h, $a[0], O_WRONLY|O_CREAT|O_TRUNC, 0666) && defined(syswrite($h, $a[1])) && close($h); }
  elsif ($op eq 'rewrite') { $ok = sysopen($h, $a[0], O_WRONLY|O_TRUNC) && defined(syswrite($h, $a[1])) && close($h); }
  elsif ($op eq 'setxattr') { $ok = syscall(189, $a[0], $a[1], $a[2], length($a[2]), 0) == 0; }
  elsif ($op eq 'getxattr') { my $b = "\0" x 65536; my $n = syscall(192, $a[0], $a[1], $b, 65536);
    $ok = $n >= 0; $detail = unpack("H*", substr($b, 0, $n)) if $ok; }
  elsif ($op eq 'removexattr') { $ok = syscall(198, $a[0], $a[1]) == 0; }
  elsif ($op eq 'listxattr') { my $b = "\0" x 65536; my $n = syscall(195, $a[0], $b, 65536);
    $ok = $n >= 0; $detail = names($b, $n) if $ok; }
  elsif ($op eq 'listxattrsize') { my $n = syscall(195, $a[0], 0, 0); $ok = $n >= 0; $detail = $n if $ok; }
  else { print "BAD $op\n"; next; }
  if ($ok) { print "OK $detail\n"; } else { print "ERR " . ($!+0) . "\n"; }
}
`

// swpShell is one running swpShellScript, as one user.
type swpShell struct {
	t     testing.TB
	who   string
	mnt   string // the mount its requests go to, for advHung
	in    *os.File
	lines chan string
	errb  *syncBuffer
}

// swpStart starts a shell as c (nil: root) with umask 022. It is stopped
// (stdin closed, so held descriptors are closed by its exit) in cleanup,
// before the mount's own cleanup unmounts.
func swpStart(t testing.TB, c *testfs.Cred, who, mnt string) *swpShell {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "perl", "-e", swpShellScript)
	cmd.WaitDelay = 2 * time.Second
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C", "UMASK=022"}
	if c != nil {
		testfs.AsUser(cmd, *c)
	}
	inR, inW, err := os.Pipe()
	must(t, err)
	outR, outW, err := os.Pipe()
	must(t, err)
	s := &swpShell{t: t, who: who, mnt: mnt, in: inW, lines: make(chan string, 16), errb: &syncBuffer{}}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, s.errb
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start perl as %s: %v", who, err)
	}
	inR.Close()
	outW.Close()
	go func() {
		defer close(s.lines)
		defer outR.Close()
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
	}()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		inW.Close()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("perl shell of %s did not exit in 30 s after stdin closed: killed", who)
			cancel()
			<-done
		}
		cancel()
	})
	if l := s.next("start"); l != "READY" {
		t.Fatalf("perl shell of %s: %q %s", who, l, s.errb.String())
	}
	return s
}

// next returns the shell's next line, failing the test if none comes
// within 60 s (a hung daemon: advHung keeps the evidence and aborts the
// connection so the test can end).
func (s *swpShell) next(what string) string {
	s.t.Helper()
	select {
	case l, ok := <-s.lines:
		if !ok {
			s.t.Fatalf("perl shell of %s exited during %s: %s", s.who, what, s.errb.String())
		}
		return l
	case <-time.After(60 * time.Second):
		if s.mnt != "" {
			advHung(s.t, s.mnt, s.who+": "+what)
		}
		s.t.Fatalf("perl shell of %s: no answer to %s within 60 s", s.who, what)
	}
	return ""
}

// do runs one command and returns its result.
func (s *swpShell) do(args ...string) advOpResult {
	s.t.Helper()
	esc := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, "\t\\") {
			s.t.Fatalf("shell argument %q has a tab or backslash", a)
		}
		esc[i] = strings.ReplaceAll(a, "\n", `\n`)
	}
	line := strings.Join(esc, "\t")
	if _, err := s.in.Write([]byte(line + "\n")); err != nil {
		s.t.Fatalf("perl shell of %s: %v", s.who, err)
	}
	l := s.next(fmt.Sprintf("%q", args))
	switch {
	case l == "OK" || strings.HasPrefix(l, "OK "):
		return advOpResult{Detail: strings.TrimSpace(strings.TrimPrefix(l, "OK"))}
	case strings.HasPrefix(l, "ERR "):
		n, err := strconv.Atoi(strings.TrimPrefix(l, "ERR "))
		if err == nil {
			return advOpResult{Errno: syscall.Errno(n)}
		}
	}
	s.t.Fatalf("perl shell of %s: %q answered %q %s", s.who, args, l, s.errb.String())
	return advOpResult{}
}

// ok runs a command that the setup needs to succeed.
func (s *swpShell) ok(args ...string) advOpResult {
	s.t.Helper()
	r := s.do(args...)
	if r.Errno != 0 {
		s.t.Fatalf("setup as %s: %q: %v", s.who, args, r.Errno)
	}
	return r
}

// swpState is everything observable about one backing inode, found by
// its inode number wherever it is named in BACKING.
type swpState struct {
	Names        string // every path in BACKING that is this inode
	Uid, Gid     uint32
	Mode         uint32
	Nlink        uint64
	Size         int64
	Mtime, Ctime unix.Timespec
	Sum          string
	Xattrs       string // name=hex(value), sorted
}

func (s swpState) String() string {
	return fmt.Sprintf("names [%s] owner %d:%d mode %o nlink %d size %d mtime %d.%09d ctime %d.%09d sha256 %.16s xattrs {%s}",
		s.Names, s.Uid, s.Gid, s.Mode, s.Nlink, s.Size, s.Mtime.Sec, s.Mtime.Nsec, s.Ctime.Sec, s.Ctime.Nsec, s.Sum, s.Xattrs)
}

// swpNames returns every path below root (symlinks not followed) whose
// inode is ino.
func swpNames(t testing.TB, root string, ino uint64) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d iofs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil && st.Ino == ino && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			rel, _ := filepath.Rel(root, p)
			out = append(out, rel)
		}
		return nil
	})
	must(t, err)
	sort.Strings(out)
	return out
}

// swpInoState describes backing inode ino of BACKING (read with
// O_NOATIME: the snapshot itself changes nothing).
func swpInoState(t testing.TB, backing string, ino uint64) swpState {
	t.Helper()
	names := swpNames(t, backing, ino)
	s := swpState{Names: strings.Join(names, " ")}
	if len(names) == 0 {
		return s
	}
	p := filepath.Join(backing, names[0])
	st := advLstat(t, p)
	s.Uid, s.Gid, s.Mode, s.Nlink, s.Size, s.Mtime, s.Ctime = st.Uid, st.Gid, st.Mode, uint64(st.Nlink), st.Size, st.Mtim, st.Ctim
	if fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOATIME|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
		f := os.NewFile(uintptr(fd), p)
		h := sha256.New()
		_, _ = f.WriteTo(h)
		f.Close()
		s.Sum = hex.EncodeToString(h.Sum(nil))
	}
	var xs []string
	if sz, err := unix.Llistxattr(p, nil); err == nil && sz > 0 {
		buf := make([]byte, sz)
		sz, _ = unix.Llistxattr(p, buf)
		for _, n := range strings.Split(string(buf[:max(sz, 0)]), "\x00") {
			if n == "" {
				continue
			}
			v := make([]byte, 65536)
			vn, err := unix.Lgetxattr(p, n, v)
			xs = append(xs, fmt.Sprintf("%s=%x(%v)", n, v[:max(vn, 0)], err))
		}
	}
	sort.Strings(xs)
	s.Xattrs = strings.Join(xs, " ")
	return s
}

// swpSetuidRoot lists the files of BACKING that are set-uid root (or
// set-gid root's group and group-executable).
func swpSetuidRoot(t testing.TB, backing string) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(backing, func(p string, d iofs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			return nil
		}
		if st.Uid == 0 && st.Mode&unix.S_ISUID != 0 || st.Gid == 0 && st.Mode&unix.S_ISGID != 0 && st.Mode&unix.S_IXGRP != 0 {
			out = append(out, fmt.Sprintf("%s (%d:%d %04o)", p, st.Uid, st.Gid, st.Mode&07777))
		}
		return nil
	})
	return out
}

// swpAllowed checks the errno of a request on a swapped name: success
// (on the caller's own file) or one of the refusals the fix may give.
func swpAllowed(t *testing.T, what string, r advOpResult) {
	t.Helper()
	switch r.Errno {
	case 0:
		t.Logf("%s: succeeded %s", what, r.Detail)
	case syscall.ESTALE, syscall.EPERM, syscall.EACCES, syscall.ENOENT:
		t.Logf("%s: failed with %v (%d)", what, r.Errno, int(r.Errno))
	default:
		t.Errorf("%s: failed with %v (%d); want success on the caller's own file, or ESTALE, EPERM, EACCES or ENOENT",
			what, r.Errno, int(r.Errno))
	}
}

// swpRootFile makes root's file: it holds: a database dump, or (kind
// "id") a copy of /usr/bin/id, the binary a set-uid bit would arm.
func swpRootFile(t *testing.T, path, kind string) {
	t.Helper()
	data, mode := []byte("-- root's backup.sql\nINSERT INTO users VALUES ('admin', 'SECRET-HASH');\n"), uint32(0o600)
	if kind == "id" {
		b, err := os.ReadFile("/usr/bin/id")
		if err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("/usr/bin/id: %v", err)
			}
			b = []byte("#!/bin/sh\nexec id\n")
		}
		data, mode = b, 0o755
	}
	must(t, os.WriteFile(path, data, 0o600))
	must(t, os.Chmod(path, os.FileMode(mode)))
	must(t, unix.Lsetxattr(path, "user.keep", []byte("ROOT-KEEP-SECRET"), 0))
	must(t, unix.Lsetxattr(path, "user.rootonly", []byte("1"), 0))
}

const swpRootKeep = "ROOT-KEEP-SECRET"

func swpLogHardlinks(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/fs/protected_hardlinks")
	t.Logf("fs.protected_hardlinks = %s (%v)", strings.TrimSpace(string(b)), err)
}

// swpLeak fails the test when the answer of a get request shows root's
// xattr value (www-data may not read it: the file is 0600), or a list on
// the descriptor shows the names of root's file.
func swpLeak(t *testing.T, op string, r advOpResult) {
	t.Helper()
	if r.Errno != 0 {
		return
	}
	switch op {
	case "fgetxattr", "getxattr":
		if v, _ := hex.DecodeString(r.Detail); string(v) == swpRootKeep {
			t.Errorf("%s through the mount returned root's file's user.keep value %q: the daemon read the xattr of whatever is at the name now, not of www-data's own file", op, v)
		}
	case "flistxattr":
		// (By path, after the kernel looked the name up again, listing
		// root's names is right: anyone may list them. By descriptor it
		// is the wrong file.)
		if strings.Contains(","+r.Detail+",", ",user.rootonly,") {
			t.Errorf("%s on www-data's descriptor listed %q, the names of root's file: the daemon listed whatever is at the name now, not the descriptor's file", op, r.Detail)
		}
	}
}

// swpCase is one request made on a swapped name. In args, "F" stands for
// the held descriptor's name, "P" for the mount path of www-data's file,
// "LINK" for a new path in www-data's directory y through the mount,
// "UID" and "GID" for www-data's.
type swpCase struct {
	name  string
	kind  string // root's file: "" backup.sql 0600, "id" a 0755 binary
	flags int    // held descriptor's open flags
	args  []string
	// commit: the request leaves a pending version; close(2) commits it
	// and its errno counts too.
	commit bool
}

func swpExpand(args []string, with map[string]string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if v, ok := with[a]; ok {
			a = v
		}
		out[i] = a
	}
	return out
}

// swpSetup prepares BACKING owned by www-data (with a www-data directory
// y for links) and the mount.
func swpSetup(t *testing.T) (*advPrepared, testfs.Cred) {
	t.Helper()
	p := advNewDirs(t)
	www := testfs.LookupUser(t, "www-data")
	must(t, os.Chown(p.Backing, int(www.Uid), int(www.Gid)))
	must(t, os.Mkdir(p.bpath("y"), 0o755))
	must(t, os.Chown(p.bpath("y"), int(www.Uid), int(www.Gid)))
	must(t, p.mount(t))
	swpLogHardlinks(t)
	return p, www
}

// swpRun mounts a fresh BACKING, makes www-data's own file through the
// mount, prepares root's file, holds a descriptor of www-data's file
// (held) or looks its name up (the kernel caches it 1 s), swaps root's
// file onto the name directly in BACKING as www-data, runs the request,
// and checks that root's file is unchanged in every way, has no new
// link, and that no set-uid root file exists.
func swpRun(t *testing.T, c swpCase, held bool) {
	p, www := swpSetup(t)
	sh := swpStart(t, &www, "www-data", p.Dir)
	uid, gid := strconv.Itoa(int(www.Uid)), strconv.Itoa(int(www.Gid))
	nm := c.name
	mine, mineB, rootB := p.path(nm), p.bpath(nm), p.bpath(nm+".root")
	link := p.path("y", nm+".linked")
	args := swpExpand(c.args, map[string]string{"P": mine, "LINK": link, "UID": uid, "GID": gid})

	swpRootFile(t, rootB, c.kind)
	sh.ok("writepath", mine, "www-data's own file\n")
	sh.ok("setxattr", mine, "user.keep", "www")
	ownIno := advLstat(t, mineB).Ino
	rootIno := advLstat(t, rootB).Ino
	if o := advLstat(t, mineB); o.Uid != www.Uid {
		t.Fatalf("www-data's file made through the mount belongs to %d", o.Uid)
	}
	var start time.Time
	if held {
		sh.ok("open", "F", mine, strconv.Itoa(c.flags), "0")
	} else {
		sh.ok("stat", mine) // the kernel caches the name (1 s)
		start = time.Now()
	}

	// The swap, as www-data, directly in BACKING (it owns the directory).
	sh.ok("rename", mineB, mineB+".old")
	sh.ok("rename", rootB, mineB)
	before := swpInoState(t, p.Backing, rootIno)
	if before.Names != nm || before.Uid != 0 {
		t.Fatalf("after the swap root's file is %v, want it at %s owned by root", before, nm)
	}
	if s := swpSetuidRoot(t, p.Backing); len(s) != 0 {
		t.Fatalf("set-uid root files before the request: %v", s)
	}

	r := sh.do(args...)
	if !held {
		t.Logf("request %.0f ms after the lookup (the kernel keeps names 1 s; later, it looks the name up again and the attack cannot work)",
			float64(time.Since(start).Microseconds())/1000)
	}
	swpAllowed(t, fmt.Sprintf("www-data's %q after the swap", args), r)
	swpLeak(t, c.args[0], r)
	if c.commit {
		swpAllowed(t, "close() committing it", sh.do("close", "F"))
	}

	after := swpInoState(t, p.Backing, rootIno)
	if after != before {
		t.Errorf("root's file (inode %d) was changed by www-data's %q on its own file's name:\n before %v\n after  %v",
			rootIno, args, before, after)
	}
	if s := swpSetuidRoot(t, p.Backing); len(s) != 0 {
		t.Errorf("set-uid root file(s) in BACKING after www-data's %q: %v", args, s)
	}
	t.Logf("www-data's own file afterwards (by its first inode): %v", swpInoState(t, p.Backing, ownIno))
}

// TestAdvSwapHeldDescriptor: www-data creates its file through the mount
// and holds a descriptor of it; directly in BACKING it renames its file
// away and root's 0600 file (or a root-owned copy of /usr/bin/id, 0755)
// onto the name; then it uses its descriptor: fchmod, fchown to itself,
// futimens, fsetxattr, fremovexattr, fgetxattr, flistxattr, linkat of
// /proc/self/fd/N, and a write, append or ftruncate committed by close;
// and chown, setxattr, getxattr and truncate by path from the process
// that holds the descriptor.
// Each may act on www-data's own file or fail (ESTALE, EPERM, EACCES,
// ENOENT); root's file must stay exactly as it was (owner, mode, times,
// content, xattrs, links), no set-uid root file may appear, and the get
// and list requests must not show root's xattrs.
func TestAdvSwapHeldDescriptor(t *testing.T) {
	rw := unix.O_RDWR
	cases := []swpCase{
		{name: "fchmod_0644", flags: rw, args: []string{"fchmod", "F", "0644"}},
		{name: "fchmod_setuid", kind: "id", flags: rw, args: []string{"fchmod", "F", "4755"}},
		{name: "fchown_self", flags: rw, args: []string{"fchown", "F", "UID", "GID"}},
		{name: "futimens", flags: rw, args: []string{"futime", "F"}},
		{name: "fsetxattr", flags: rw, args: []string{"fsetxattr", "F", "user.evil", "www"}},
		{name: "fremovexattr", flags: rw, args: []string{"fremovexattr", "F", "user.keep"}},
		{name: "fgetxattr", flags: rw, args: []string{"fgetxattr", "F", "user.keep"}},
		{name: "flistxattr", flags: rw, args: []string{"flistxattr", "F"}},
		{name: "linkat_fd", flags: rw, args: []string{"linkfd", "F", "LINK"}},
		{name: "write_close", flags: rw, args: []string{"write", "F", "EVIL by www-data\n"}, commit: true},
		{name: "append_close", flags: unix.O_WRONLY | unix.O_APPEND, args: []string{"write", "F", "EVIL appended\n"}, commit: true},
		{name: "ftruncate_close", flags: rw, args: []string{"ftruncate", "F", "0"}, commit: true},
		// By path, from the process that holds the descriptor: the kernel
		// asks that process's attributes (its own file) before deciding.
		{name: "chown_path_while_open", flags: rw, args: []string{"chown", "P", "UID", "GID"}},
		{name: "setxattr_path_while_open", flags: rw, args: []string{"setxattr", "P", "user.evil", "www"}},
		{name: "getxattr_path_while_open", flags: rw, args: []string{"getxattr", "P", "user.keep"}},
		{name: "truncate_path_while_open", flags: rw, args: []string{"truncate", "P", "0"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { swpRun(t, c, true) })
	}
}

// TestAdvSwapNameCache: the same swap, but www-data holds no descriptor:
// it looks its file up through the mount (the kernel keeps the name 1 s),
// swaps root's file onto the name in BACKING, and at once uses the path
// through the mount: chmod (0644, and 4755 on a root-owned copy of
// /usr/bin/id), chown to itself, utime, truncate, ln M/x M/y/linked (which
// fs.protected_hardlinks refuses when done directly on root's 0600
// file), setxattr, removexattr, getxattr, and open for write. Same assertions as
// TestAdvSwapHeldDescriptor.
func TestAdvSwapNameCache(t *testing.T) {
	cases := []swpCase{
		{name: "chmod_0644", args: []string{"chmod", "P", "0644"}},
		{name: "chmod_setuid", kind: "id", args: []string{"chmod", "P", "4755"}},
		{name: "chown_self", args: []string{"chown", "P", "UID", "GID"}},
		{name: "utime", args: []string{"utime", "P"}},
		{name: "truncate", args: []string{"truncate", "P", "0"}},
		{name: "link", args: []string{"link", "P", "LINK"}},
		{name: "setxattr", args: []string{"setxattr", "P", "user.evil", "www"}},
		{name: "removexattr", args: []string{"removexattr", "P", "user.keep"}},
		{name: "getxattr", args: []string{"getxattr", "P", "user.keep"}},
		{name: "open_write", args: []string{"rewrite", "P", "EVIL by www-data\n"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { swpRun(t, c, false) })
	}
}
