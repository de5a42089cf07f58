package fs_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/testfs"
)

// TestAdvDeniedAsUser: what the backing file system denies www-data, the
// mount denies with the same errno (default_permissions: the kernel
// checks the attributes safefs reports, which are the backing ones).
// Every operation runs twice as www-data, through the mount and on BACKING
// directly; both must fail, with the same errno, and change nothing.
func TestAdvDeniedAsUser(t *testing.T) {
	m := testfs.New(t)
	www := testfs.LookupUser(t, "www-data")
	nobody := testfs.LookupUser(t, "nobody")

	// The tree, made directly in BACKING.
	must(t, os.WriteFile(m.BackingPath("secret"), []byte("root only\n"), 0o600))
	must(t, os.Chmod(m.BackingPath("secret"), 0o600))
	must(t, os.WriteFile(m.BackingPath("public"), []byte("root, world-readable\n"), 0o644))
	must(t, os.Chmod(m.BackingPath("public"), 0o644))
	must(t, os.WriteFile(m.BackingPath("nobodys"), []byte("nobody's\n"), 0o666))
	must(t, os.Chmod(m.BackingPath("nobodys"), 0o666))
	must(t, os.Chown(m.BackingPath("nobodys"), int(nobody.Uid), int(nobody.Gid)))
	must(t, os.Mkdir(m.BackingPath("rootdir"), 0o755))
	must(t, os.Chmod(m.BackingPath("rootdir"), 0o755))
	must(t, os.WriteFile(m.BackingPath("rootdir", "file"), []byte("in root's dir\n"), 0o666))
	must(t, os.Chmod(m.BackingPath("rootdir", "file"), 0o666))
	must(t, os.Mkdir(m.BackingPath("sticky"), 0o777))
	must(t, unix.Chmod(m.BackingPath("sticky"), 0o1777)) // os.Chmod drops 0o7000 bits
	must(t, os.WriteFile(m.BackingPath("sticky", "nobodys"), []byte("nobody's, sticky dir\n"), 0o666))
	must(t, os.Chmod(m.BackingPath("sticky", "nobodys"), 0o666))
	must(t, os.Chown(m.BackingPath("sticky", "nobodys"), int(nobody.Uid), int(nobody.Gid)))
	must(t, os.Mkdir(m.BackingPath("wwwdir"), 0o755))
	must(t, os.Chown(m.BackingPath("wwwdir"), int(www.Uid), int(www.Gid)))
	must(t, os.WriteFile(m.BackingPath("wwwfile"), []byte("www's\n"), 0o644))
	must(t, os.Chown(m.BackingPath("wwwfile"), int(www.Uid), int(www.Gid)))

	cases := []struct {
		name string
		args []string // "%s" is replaced by the mount or backing root
	}{
		{"read 0600 root file", []string{"read", "%s/secret"}},
		{"write 0644 root file", []string{"wronly", "%s/public", "x"}},
		{"truncate 0644 root file", []string{"trunc", "%s/public"}},
		{"chmod another user's file", []string{"chmod", "%s/nobodys", "0777"}},
		{"chown another user's file to self", []string{"chown", "%s/nobodys", fmt.Sprint(www.Uid), fmt.Sprint(www.Gid)}},
		{"chown own file to root", []string{"chown", "%s/wwwfile", "0", "0"}},
		{"chown own file to nobody", []string{"chown", "%s/wwwfile", fmt.Sprint(nobody.Uid), "-1"}},
		{"chgrp own file to root group", []string{"chown", "%s/wwwfile", "-1", "0"}},
		{"utime another user's file", []string{"utime", "%s/nobodys"}},
		{"setxattr on root's 0644 file", []string{"setxattr", "%s/public", "user.x", "v"}},
		{"create in root's dir", []string{"create", "%s/rootdir/new", "0666"}},
		{"mkdir in root's dir", []string{"mkdir", "%s/rootdir/newdir", "0777"}},
		{"mkfifo in root's dir", []string{"mkfifo", "%s/rootdir/fifo", "0666"}},
		{"symlink in root's dir", []string{"symlink", "/etc/passwd", "%s/rootdir/lnk"}},
		{"unlink in root's dir", []string{"unlink", "%s/rootdir/file"}},
		{"rename in root's dir", []string{"rename", "%s/rootdir/file", "%s/rootdir/file2"}},
		{"rename out of root's dir", []string{"rename", "%s/rootdir/file", "%s/wwwdir/stolen"}},
		{"rename over root's file", []string{"rename", "%s/wwwfile", "%s/rootdir/file"}},
		{"unlink another user's file in sticky dir", []string{"unlink", "%s/sticky/nobodys"}},
		{"rename another user's file in sticky dir", []string{"rename", "%s/sticky/nobodys", "%s/sticky/mine"}},
		{"hard link 0600 root file (protected_hardlinks)", []string{"link", "%s/secret", "%s/wwwdir/secret"}},
		{"rmdir root's dir", []string{"rmdir", "%s/rootdir"}},
		{"chmod root's dir", []string{"chmod", "%s/rootdir", "0777"}},
	}
	before := advSnapshot(t, m.Backing)
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			sub := func(root string) []string {
				out := make([]string, len(c.args))
				for i, a := range c.args {
					out[i] = strings.ReplaceAll(a, "%s", root)
				}
				return out
			}
			viaMount := advOp(t, &www, "", sub(m.Dir)...)
			direct := advOp(t, &www, "", sub(m.Backing)...)
			if direct.Errno == 0 {
				t.Fatalf("the test is wrong: the backing file system allows %v", sub(m.Backing))
			}
			if viaMount.Errno != direct.Errno {
				t.Errorf("through the mount: %v (%d); on BACKING: %v (%d); want the same", viaMount.Errno, viaMount.Errno, direct.Errno, direct.Errno)
			}
		})
	}
	after := advSnapshot(t, m.Backing)
	// The internal directory changes (journal, staging); everything else must not.
	for k := range before {
		if strings.HasPrefix(k, ".safefs") {
			delete(before, k)
			delete(after, k)
		}
	}
	for k := range after {
		if strings.HasPrefix(k, ".safefs") {
			delete(after, k)
		}
	}
	before["."], after["."] = advEntry{}, advEntry{} // atime of the top moves with listings
	advSameTree(t, "BACKING after denied operations", before, after)
}

// TestAdvCreateOwnerUmask: entries created through the mount by www-data
// belong to www-data and honour its umask; rewriting another user's file
// keeps that user's ownership and drops set-id bits and file capabilities.
func TestAdvCreateOwnerUmask(t *testing.T) {
	m := testfs.New(t)
	www := testfs.LookupUser(t, "www-data")
	must(t, os.Mkdir(m.BackingPath("w"), 0o755))
	must(t, os.Chown(m.BackingPath("w"), int(www.Uid), int(www.Gid)))

	check := func(t *testing.T, rel string, wantType, wantPerm uint32) {
		t.Helper()
		for _, p := range []string{m.Path(rel), m.BackingPath(rel)} {
			st := advLstat(t, p)
			if st.Uid != www.Uid || st.Gid != www.Gid {
				t.Errorf("%s: owner %d:%d, want www-data %d:%d", p, st.Uid, st.Gid, www.Uid, www.Gid)
			}
			if st.Mode&unix.S_IFMT != wantType {
				t.Errorf("%s: type %o, want %o", p, st.Mode&unix.S_IFMT, wantType)
			}
			if wantType != unix.S_IFLNK && st.Mode&07777 != wantPerm {
				t.Errorf("%s: mode %04o, want %04o", p, st.Mode&07777, wantPerm)
			}
		}
	}
	ok := func(t *testing.T, r advOpResult) {
		t.Helper()
		if r.Errno != 0 {
			t.Fatalf("as www-data: %v", r.Errno)
		}
	}
	t.Run("create_0666_umask_027", func(t *testing.T) {
		ok(t, advOp(t, &www, "027", "create", m.Path("w", "f"), "0666"))
		check(t, "w/f", unix.S_IFREG, 0o640)
	})
	t.Run("write_creates_0666_umask_027", func(t *testing.T) {
		ok(t, advOp(t, &www, "027", "write", m.Path("w", "g"), "hello"))
		check(t, "w/g", unix.S_IFREG, 0o640)
		if b, err := os.ReadFile(m.BackingPath("w", "g")); err != nil || string(b) != "hello" {
			t.Errorf("committed %q, %v", b, err)
		}
	})
	t.Run("mkdir_0777_umask_027", func(t *testing.T) {
		ok(t, advOp(t, &www, "027", "mkdir", m.Path("w", "d"), "0777"))
		check(t, "w/d", unix.S_IFDIR, 0o750)
	})
	t.Run("mkfifo_0666_umask_027", func(t *testing.T) {
		ok(t, advOp(t, &www, "027", "mkfifo", m.Path("w", "p"), "0666"))
		check(t, "w/p", unix.S_IFIFO, 0o640)
	})
	t.Run("symlink", func(t *testing.T) {
		ok(t, advOp(t, &www, "027", "symlink", "/etc/shadow", m.Path("w", "l")))
		check(t, "w/l", unix.S_IFLNK, 0)
	})
	t.Run("create_setuid_mode", func(t *testing.T) {
		// www-data may make its own file set-uid (it is www-data's bit to
		// set: the mount is nosuid, and BACKING lets www-data do the same).
		// What the daemon must guarantee: the new file is www-data's, never
		// root's, and it gets the mode the caller asked for (less its
		// umask), exactly as BACKING gives www-data: docs/threat-model.md,
		// "New files ... belong to the caller ... with the caller's umask";
		// "The mount grants exactly what BACKING grants". The oracle is
		// the same create done by www-data directly in BACKING.
		for _, c := range []struct{ mode, umask string }{{"4755", "000"}, {"4755", "022"}, {"6755", "000"}} {
			direct := advOp(t, &www, c.umask, "create", m.BackingPath("w", "direct-"+c.mode+"-"+c.umask), c.mode)
			if direct.Errno != 0 {
				t.Fatalf("the test is wrong: www-data cannot create its own file directly in BACKING: %v", direct.Errno)
			}
			want := advLstat(t, m.BackingPath("w", "direct-"+c.mode+"-"+c.umask))
			nm := "suid-" + c.mode + "-" + c.umask
			ok(t, advOp(t, &www, c.umask, "create", m.Path("w", nm), c.mode))
			for _, p := range []string{m.BackingPath("w", nm), m.Path("w", nm)} {
				st := advLstat(t, p)
				if st.Uid != www.Uid || st.Gid != www.Gid {
					t.Errorf("%s: owner %d:%d, want www-data %d:%d", p, st.Uid, st.Gid, www.Uid, www.Gid)
				}
				if st.Mode != want.Mode {
					t.Errorf("%s: created by www-data with mode %s, umask %s: mode %04o; the same create directly in BACKING gives %04o",
						p, c.mode, c.umask, st.Mode&07777, want.Mode&07777)
				}
			}
		}
		if s := swpSetuidRoot(t, m.Backing); len(s) != 0 {
			t.Errorf("set-uid root files in BACKING after www-data's creates: %v", s)
		}
	})
	t.Run("setgid_dir_group", func(t *testing.T) {
		must(t, os.Mkdir(m.BackingPath("w", "sg"), 0o777))
		must(t, unix.Chmod(m.BackingPath("w", "sg"), 0o2777))
		must(t, os.Chown(m.BackingPath("w", "sg"), 0, 0))
		ok(t, advOp(t, &www, "022", "create", m.Path("w", "sg", "f"), "0666"))
		st := advLstat(t, m.BackingPath("w", "sg", "f"))
		if st.Uid != www.Uid || st.Gid != 0 {
			t.Errorf("in a set-gid root:root dir: owner %d:%d, want %d:0", st.Uid, st.Gid, www.Uid)
		}
	})
	t.Run("rewrite_keeps_other_owner", func(t *testing.T) {
		must(t, os.WriteFile(m.BackingPath("shared"), []byte("old"), 0o666))
		must(t, os.Chmod(m.BackingPath("shared"), 0o666))
		ok(t, advOp(t, &www, "077", "write", m.Path("shared"), "new by www"))
		st := advLstat(t, m.BackingPath("shared"))
		if st.Uid != 0 || st.Gid != 0 || st.Mode&07777 != 0o666 {
			t.Errorf("after www-data rewrote root's 0666 file: %d:%d %04o, want 0:0 0666", st.Uid, st.Gid, st.Mode&07777)
		}
		if b, _ := os.ReadFile(m.BackingPath("shared")); string(b) != "new by www" {
			t.Errorf("content %q", b)
		}
	})
	// A root file www-data may write (0777) but must not run as root:
	// set-uid and set-gid (group-executable), or a file capability. When
	// www-data changes the content, the kernel drops those on any file
	// system; through the mount each commit kind must too (docs/manual.md, promise
	// 11), while the owner, group and the other mode bits carry over. The
	// oracle for the mode is the same write by www-data directly in
	// BACKING. Kinds: "replace" (one name, O_WRONLY over the content),
	// "inplace" (two hard links: rewritten in place), "append" (O_APPEND).
	const orig = "#!/bin/sh\nid\n"
	kinds := []struct {
		name  string
		links int
		op    string // vacWriteAs mode
	}{{"replace", 1, "wronly"}, {"inplace", 2, "wronly"}, {"append", 1, "append"}}
	for _, k := range kinds {
		mk := func(t *testing.T, nm string, mode uint32) string {
			p := m.BackingPath(nm)
			must(t, os.WriteFile(p, []byte(orig), 0o777))
			must(t, unix.Chmod(p, mode))
			if k.links > 1 {
				must(t, os.Link(p, p+".link"))
			}
			return p
		}
		want := func(content string) string { // what the write leaves
			if k.op == "append" {
				return orig + content
			}
			if len(content) < len(orig) {
				return content + orig[len(content):]
			}
			return content
		}
		t.Run("rewrite_drops_setuid_root_"+k.name, func(t *testing.T) {
			content := "#!/bin/sh\nexec /bin/sh\n"
			direct := mk(t, "suidroot-direct-"+k.name, 0o6777)
			if e := vacWriteAs(t, www, direct, k.op, content); e != 0 {
				t.Fatalf("the test is wrong: www-data cannot write the 0777 file directly in BACKING: %v", e)
			}
			wantMode := advLstat(t, direct).Mode
			if wantMode&(unix.S_ISUID|unix.S_ISGID) != 0 {
				t.Fatalf("the test is wrong: the kernel left %04o after www-data wrote directly", wantMode&07777)
			}
			p := mk(t, "suidroot-"+k.name, 0o6777)
			events := vacWatch(t, p)
			if e := vacWriteAs(t, www, m.Path(filepath.Base(p)), k.op, content); e != 0 {
				t.Fatalf("www-data writing the 0777 file through the mount: %v", e)
			}
			// Never, not even for a moment, root's set-uid file with
			// www-data's bytes in it: BACKING is not nosuid, anyone could
			// run it there meanwhile (a plain write drops the bits before
			// its first byte). inotify reports the changes of the inode in
			// order: a content change (IN_MODIFY) before any change of its
			// attributes (IN_ATTRIB) happened while it was still 6777 root.
			for i, ev := range events() {
				if ev&unix.IN_ATTRIB != 0 {
					break
				}
				if ev&unix.IN_MODIFY != 0 {
					t.Errorf("the %s commit changed the content of the 6777 root file before dropping set-uid (inotify event %d: modify before any attribute change)", k.name, i)
					break
				}
			}
			st := advLstat(t, p)
			if st.Uid != 0 || st.Gid != 0 || st.Mode != wantMode {
				t.Errorf("www-data changed a 6777 root file through the mount (%s commit): %d:%d %04o; want root's 0:0 and %04o, as the same write directly in BACKING",
					k.name, st.Uid, st.Gid, st.Mode&07777, wantMode&07777)
			}
			if b, err := os.ReadFile(p); err != nil || string(b) != want(content) {
				t.Errorf("content %q (%v), want %q", b, err, want(content))
			}
			if int(st.Nlink) != k.links {
				t.Errorf("%d links after the commit, want %d", st.Nlink, k.links)
			}
		})
		t.Run("rewrite_drops_file_capability_"+k.name, func(t *testing.T) {
			p := mk(t, "capfile-"+k.name, 0o777)
			// vfs_cap_data v2: magic|effective, permitted = CAP_NET_BIND_SERVICE (10).
			capv, _ := hex.DecodeString("01000002" + "00040000" + "00000000" + "00000000" + "00000000")
			if err := unix.Setxattr(p, "security.capability", capv, 0); err != nil {
				vacSkip(t, "cannot set a file capability on %s: %v", p, err)
			}
			if got := vacXattr(t, p, "security.capability"); !bytes.Equal(got, capv) {
				t.Fatalf("the test is wrong: security.capability reads back %x, want %x", got, capv)
			}
			if e := vacWriteAs(t, www, m.Path(filepath.Base(p)), k.op, "other binary"); e != 0 {
				t.Fatalf("www-data writing the 0777 file through the mount: %v", e)
			}
			if b, err := os.ReadFile(p); err != nil || string(b) != want("other binary") {
				t.Errorf("content %q (%v), want %q", b, err, want("other binary"))
			}
			if got := vacXattr(t, p, "security.capability"); got != nil {
				t.Errorf("www-data changed a file with a capability (%s commit) and the capability is still there: %x", k.name, got)
			}
			if st := advLstat(t, p); st.Uid != 0 || st.Mode&07777 != 0o777 || int(st.Nlink) != k.links {
				t.Errorf("after the write: %d:%d %04o, %d links; want root's 0777 with %d links", st.Uid, st.Gid, st.Mode&07777, st.Nlink, k.links)
			}
		})
	}
}

// vacWriteAs writes text to path as c in one Perl process, and returns
// the errno of the first step that failed (0: all done). mode: "wronly"
// (O_WRONLY, at offset 0) or "append" (O_WRONLY|O_APPEND). Bounded: a
// hang fails the test.
func vacWriteAs(t *testing.T, c testfs.Cred, path, mode, text string) syscall.Errno {
	t.Helper()
	const script = `
use strict; use Fcntl;
my ($path, $mode, $text) = @ARGV;
my $flags = $mode eq "append" ? O_WRONLY|O_APPEND : O_WRONLY;
my $f;
if (sysopen($f, $path, $flags) && syswrite($f, $text) == length($text) && close($f)) { print "OK\n" }
else { print "ERR ", $!+0, "\n" }
`
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := testfs.AsUser(execCmd(ctx, "perl", "-e", script, path, mode, text), c).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("writing %s as uid %d: no answer within the deadline (hung)", path, c.Uid)
	}
	line := strings.TrimSpace(string(out))
	if err != nil || !strings.HasPrefix(line, "OK") && !strings.HasPrefix(line, "ERR ") {
		t.Fatalf("writing %s as uid %d: %v: %s", path, c.Uid, err, out)
	}
	var e int
	if _, err := fmt.Sscanf(line, "ERR %d", &e); err == nil {
		return syscall.Errno(e)
	}
	return 0
}

// vacWatch watches the inode of p with inotify for content changes
// (IN_MODIFY) and attribute changes (IN_ATTRIB). The function it returns
// stops watching and gives the masks of the events since, in order
// (inotify merges a repeat of the last event into it). An overflowed
// queue fails the test: the order would be unknown.
func vacWatch(t *testing.T, p string) func() []uint32 {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	must(t, err)
	if _, err := unix.InotifyAddWatch(fd, p, unix.IN_MODIFY|unix.IN_ATTRIB|unix.IN_DONT_FOLLOW); err != nil {
		unix.Close(fd)
		t.Fatalf("inotify watch of %s: %v", p, err)
	}
	done := false
	t.Cleanup(func() {
		if !done {
			unix.Close(fd)
		}
	})
	return func() []uint32 {
		t.Helper()
		defer func() { done = true; unix.Close(fd) }()
		var masks []uint32
		buf := make([]byte, 64<<10)
		for {
			n, err := unix.Read(fd, buf)
			if err == unix.EAGAIN {
				return masks
			}
			if err != nil {
				t.Fatalf("inotify read: %v", err)
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
					t.Fatalf("inotify queue overflowed: the order of changes is unknown")
				}
				masks = append(masks, ev.Mask)
				off += unix.SizeofInotifyEvent + int(ev.Len)
			}
		}
	}
}

// vacXattr returns the value of the extended attribute name of p (not
// following a symlink), or nil if p has none by that name.
func vacXattr(t testing.TB, p, name string) []byte {
	t.Helper()
	buf := make([]byte, 64<<10)
	n, err := unix.Lgetxattr(p, name, buf)
	if err == unix.ENODATA {
		return nil
	}
	if err != nil {
		t.Fatalf("getxattr %s %s: %v", p, name, err)
	}
	return buf[:n]
}

// TestAdvCreateRaceExistingFile: www-data opens a name with O_CREAT
// through the mount while the name flips between absent and a root-owned
// 0600 file in BACKING (renamed back and forth in www-data's own directory,
// something www-data itself could do directly in BACKING). When the name
// exists at LOOKUP the kernel checks permissions and refuses; when it
// appears between LOOKUP and CREATE, the daemon must not hand www-data a
// read-write handle on root's file: the expected safe outcome is an error
// (EEXIST, EACCES, ...) or a file of www-data's own, never root's bytes
// readable or root's file rewritten.
func TestAdvCreateRaceExistingFile(t *testing.T) {
	m := testfs.New(t)
	www := testfs.LookupUser(t, "www-data")
	must(t, os.Mkdir(m.BackingPath("up"), 0o755))
	must(t, os.Chown(m.BackingPath("up"), int(www.Uid), int(www.Gid)))
	secret := []byte("ROOT-SECRET-0600\n")
	must(t, os.WriteFile(m.BackingPath("up", "hold"), secret, 0o600))
	must(t, os.Chmod(m.BackingPath("up", "hold"), 0o600))

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the BACKING side: flip up/x between absent and root's file
		defer wg.Done()
		hold, x := m.BackingPath("up", "hold"), m.BackingPath("up", "x")
		for {
			select {
			case <-stop:
				_ = unix.Renameat2(unix.AT_FDCWD, x, unix.AT_FDCWD, hold, unix.RENAME_NOREPLACE)
				return
			default:
			}
			// A rename over x also removes a file www-data created there.
			_ = os.Rename(hold, x)
			_ = os.Rename(x, hold)
		}
	}()
	// The www-data side, in one Perl process: O_RDWR|O_CREAT, read, close;
	// report every handle that read root's bytes. (No write: what a
	// commit does to a swapped name is TestAdvCommitOverSwappedTarget.)
	script := `
use strict; use Fcntl;
my ($path, $n, $secret) = @ARGV;
my ($opened, $leaks, $errs) = (0, 0, 0);
for my $i (1..$n) {
  if (sysopen(my $f, $path, O_RDWR|O_CREAT, 0644)) {
    $opened++;
    my $b = ""; sysread($f, $b, 4096);
    if ($b eq $secret) { $leaks++; print "LEAK read=", unpack("H*", $b), "\n"; }
    close($f);
  } else { $errs++; }
}
print "DONE opened=$opened leaks=$leaks errs=$errs\n";
`
	var out []byte
	var runErr error
	for round := 0; round < 4 && ctx.Err() == nil; round++ {
		cmd := testfs.AsUser(execCmd(ctx, "perl", "-e", script, m.Path("up", "x"), "3000", string(secret)), www)
		out, runErr = cmd.CombinedOutput()
		if runErr != nil || bytes.Contains(out, []byte("LEAK")) {
			break
		}
	}
	close(stop)
	wg.Wait()
	if runErr != nil && ctx.Err() == nil {
		t.Fatalf("www-data workload: %v\n%s", runErr, out)
	}
	t.Logf("last round: %s", lastLine(out))
	if bytes.Contains(out, []byte("LEAK")) {
		t.Errorf("www-data got a read-write handle on root's 0600 file through O_CREAT:\n%s", firstLines(out, 5))
	}
	b, err := os.ReadFile(m.BackingPath("up", "hold"))
	var st unix.Stat_t
	if err == nil {
		err = unix.Lstat(m.BackingPath("up", "hold"), &st)
	}
	if err != nil || !bytes.Equal(b, secret) || st.Uid != 0 {
		t.Errorf("root's file is now %q owned by %d (%v), want %q owned by root", b, st.Uid, err, secret)
	}
}

// TestAdvCommitOverSwappedTarget: www-data has its own file open for
// writing through the mount; before it closes, someone with write access
// to BACKING (www-data itself: it owns the directory) renames a root-owned
// 0600 file onto that name in BACKING. On any file system the writer's
// bytes go to the writer's own inode, so the expected safe outcome is that
// root's file keeps its bytes, and that no root-owned file ends up holding
// www-data's bytes (a forgery www-data could not make itself: it can
// replace root's file, but only with a file it owns).
func TestAdvCommitOverSwappedTarget(t *testing.T) {
	m := testfs.New(t)
	www := testfs.LookupUser(t, "www-data")
	must(t, os.Mkdir(m.BackingPath("up"), 0o755))
	must(t, os.Chown(m.BackingPath("up"), int(www.Uid), int(www.Gid)))
	secret := []byte("ssh-ed25519 AAAA root's key\n")
	evil := "ssh-ed25519 EVIL www-data's key\n"
	// The writer holds its file open until it reads a line on stdin.
	script := `
use strict; use Fcntl;
my ($path, $mode, $text) = @ARGV;
my $flags = $mode eq "append" ? O_WRONLY|O_APPEND : O_WRONLY|O_TRUNC;
sysopen(my $f, $path, $flags) or die "open: $!\n";
defined(syswrite($f, $text)) or die "write: $!\n";
print "READY\n"; $| = 1;
my $go = <STDIN>;
if (close($f)) { print "CLOSED OK\n" } else { print "CLOSED ERR ", $!+0, "\n" }
`
	for _, mode := range []string{"replace", "append"} {
		t.Run(mode, func(t *testing.T) {
			name := "authorized_keys_" + mode
			b := m.BackingPath("up", name)
			own := m.BackingPath("up", name+".own")
			root := m.BackingPath("up", name+".root")
			must(t, os.WriteFile(own, []byte("www's own file\n"), 0o644))
			must(t, os.Chown(own, int(www.Uid), int(www.Gid)))
			must(t, os.Rename(own, b))
			must(t, os.WriteFile(root, secret, 0o600))
			must(t, os.Chmod(root, 0o600))

			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := testfs.AsUser(execCmd(ctx, "perl", "-e", script, m.Path("up", name), mode, evil), www)
			stdin, err := cmd.StdinPipe()
			must(t, err)
			var out bytes.Buffer
			pr, pw, err := os.Pipe()
			must(t, err)
			cmd.Stdout, cmd.Stderr = pw, &out
			must(t, cmd.Start())
			pw.Close()
			line := make([]byte, 6)
			if _, err := pr.Read(line); err != nil || string(line) != "READY\n" {
				t.Fatalf("writer: %q %v %s", line, err, out.String())
			}
			// The swap, directly in BACKING.
			must(t, os.Rename(root, b))
			stdin.Write([]byte("go\n"))
			rest := make([]byte, 100)
			n, _ := pr.Read(rest)
			cmd.Wait()
			t.Logf("writer: %s", strings.TrimSpace(string(rest[:n])))

			got, err := os.ReadFile(b)
			st := advLstat(t, b)
			t.Logf("after close: %s is %d:%d %04o %q (%v)", name, st.Uid, st.Gid, st.Mode&07777, got, err)
			if st.Uid == 0 && bytes.Contains(got, []byte("EVIL")) {
				t.Errorf("www-data's bytes were committed into a root-owned file (%d:%d %04o): %q; "+
					"the commit followed the name to another inode instead of the one the writer opened",
					st.Uid, st.Gid, st.Mode&07777, got)
			}
		})
	}
}

func lastLine(b []byte) string {
	s := strings.Split(strings.TrimSpace(string(b)), "\n")
	return s[len(s)-1]
}

func firstLines(b []byte, n int) string {
	s := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(s) > n {
		s = s[:n]
	}
	return strings.Join(s, "\n")
}
