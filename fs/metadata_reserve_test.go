package fs_test

// Root's reserved blocks through metadata (security round 3, item 3):
// once data writes by www-data were refused at the limit, it made
// thousands of directories (or set xattrs on new files) through the
// mount, which the daemon makes as root: free space fell into root's
// reserve and root could not write 1 MiB. Every change of metadata that
// may take a block stops where data writes stop.

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/testfs"
)

// resMetaFlood is a Perl script: in DIR, make up to MAX entries of
// kind WHAT, named WHAT0, WHAT1, ..., until one fails: "MADE <count>
// <errno>" (errno 0: none failed). Kinds: mkdir; symlink (a 200-byte
// target, which takes a block); xattr (a 600-byte user.pad on the
// existing files x0, x1, ..., which does not fit in the inode; each
// value differs, so that ext4 shares no xattr block between them).
const resMetaFlood = `
use strict; use Fcntl;
my ($dir, $what, $max) = @ARGV;
my $target = "t" x 200; my $val = "v" x 600; my $i;
for ($i = 0; $i < $max; $i++) {
  my $ok;
  if ($what eq 'mkdir') { $ok = mkdir("$dir/mkdir$i", 0755); }
  elsif ($what eq 'symlink') { $ok = symlink("$target$i", "$dir/symlink$i"); }
  elsif ($what eq 'xattr') { my ($p, $n, $v) = ("$dir/x$i", "user.pad", "$val$i"); $ok = syscall(188, $p, $n, $v, length($v), 0) == 0; }
  else { die "unknown $what\n"; }
  if (!$ok) { print "MADE $i " . ($!+0) . "\n"; exit 0; }
}
print "MADE $i 0\n";
`

// resMetaClean is a Perl script: remove DIR/WHAT0 .. DIR/WHAT<COUNT-1>
// (rmdir for mkdir, else unlink); "CLEANED" when all went.
const resMetaClean = `
use strict;
my ($dir, $what, $count) = @ARGV;
for my $i (0..$count-1) {
  my $p = "$dir/$what$i";
  ($what eq 'mkdir' ? rmdir($p) : unlink($p)) or die "remove $p: $!\n";
}
print "CLEANED\n";
`

// resMakeMany is a Perl script: create DIR/x0 .. DIR/x<COUNT-1>, empty.
const resMakeMany = `
use strict; use Fcntl;
my ($dir, $count) = @ARGV;
for my $i (0..$count-1) {
  my $f;
  sysopen($f, "$dir/x$i", O_WRONLY|O_CREAT|O_EXCL, 0644) && close($f) or die "create x$i: $!\n";
}
print "MADE\n";
`

// resMetaCap bounds each flood: more entries than the image has inodes.
const resMetaCap = 20000

// TestResMetadataKeepsRootReserve: after www-data filled the file system
// with data through the mount up to its limit, its mkdir, symlink and
// setxattr floods (each let go once the previous one's entries are
// removed) end with ENOSPC before root's reserve is touched, so do its
// mknod, link, rename and create there, and root can still write 1 MiB
// through the mount.
func TestResMetadataKeepsRootReserve(t *testing.T) {
	www := testfs.LookupUser(t, "www-data")
	testfs.Available(t)
	img := resLoopExt4(t)
	backing := filepath.Join(img, "backing")
	must(t, os.Mkdir(backing, 0o755))
	resChown(t, backing, www)
	sfs := resStatfs(t, img)
	bsize := int64(sfs.Bsize)
	reserve := int64(sfs.Bfree-sfs.Bavail) * bsize
	t.Logf("image: block %d, %d bytes free, reserve %d, %d inodes free", bsize, int64(sfs.Bfree)*bsize, reserve, sfs.Ffree)
	if reserve < 1<<20 {
		t.Fatalf("the image has a reserve of %d bytes: want 5 %% of 64 MiB", reserve)
	}

	mnt := filepath.Join(filepath.Dir(img), "mnt")
	must(t, os.Mkdir(mnt, 0o755))
	p := &advPrepared{Backing: backing, Dir: mnt}
	must(t, p.mount(t))
	meta := p.path("meta")
	must(t, os.Mkdir(meta, 0o755))
	resChown(t, meta, www)
	// The files the xattr flood sets attributes on, made while there is
	// room (an empty file takes no block).
	if out := resPerl(t, &www, 120*time.Second, resMakeMany, meta, "6000"); strings.TrimSpace(out) != "MADE" {
		t.Fatalf("making the xattr flood's files: %q", out)
	}

	written, where, errno := resFillAs(t, www, p.path("fill"))
	t.Logf("www-data's data through the mount: %d bytes, then %s: %v", written, where, errno)
	if errno != syscall.ENOSPC {
		t.Fatalf("premise: www-data's data writes should stop with ENOSPC at its limit: %s gave %v", where, errno)
	}

	before := p.resStats().NoSpace
	freeAfter := func(what string) {
		t.Helper()
		unix.Sync()
		sfs := resStatfs(t, img)
		free := int64(sfs.Bfree) * bsize
		t.Logf("after %s: %d bytes free (reserve %d), %d inodes free", what, free, reserve, sfs.Ffree)
		if free < reserve {
			t.Errorf("after www-data's %s through the mount: %d bytes free, below root's reserve of %d", what, free, reserve)
		}
	}
	for _, what := range []string{"mkdir", "symlink", "xattr"} {
		out := strings.Fields(resPerl(t, &www, 300*time.Second, resMetaFlood, meta, what, strconv.Itoa(resMetaCap)))
		if len(out) != 3 || out[0] != "MADE" {
			t.Fatalf("%s flood: bad output %q", what, out)
		}
		made, _ := strconv.Atoi(out[1])
		e, _ := strconv.Atoi(out[2])
		t.Logf("www-data's %s flood: %d made, then %v", what, made, syscall.Errno(e))
		if syscall.Errno(e) != syscall.ENOSPC {
			t.Errorf("www-data's %s flood after the data limit: %d made, then %v; want ENOSPC", what, made, syscall.Errno(e))
		}
		freeAfter(what + " flood")
		if what != "xattr" && made > 0 {
			resPerl(t, &www, 300*time.Second, resMetaClean, meta, what, strconv.Itoa(made))
		}
	}

	// At the limit (the xattr flood left it there), whatever may take a
	// block is refused to www-data, with the data writes' errno.
	if r := advOp(t, nil, "", "write", p.path("meta", "root-old"), "x"); r.Errno != 0 {
		t.Fatalf("root writing a small file through the mount at www-data's limit: %v", r.Errno)
	}
	must(t, os.Chown(filepath.Join(backing, "meta", "root-old"), int(www.Uid), int(www.Gid)))
	for _, op := range [][]string{
		{"mkfifo", p.path("meta", "fifo"), "0644"},
		{"link", p.path("meta", "x0"), p.path("meta", "link")},
		{"rename", p.path("meta", "root-old"), p.path("renamed")},
		{"create", p.path("meta", "new"), "0644"},
		{"mkdir", p.path("meta", "dir"), "0755"},
		{"symlink", "short", p.path("meta", "sym")},
		{"setxattr", p.path("meta", "x5999"), "user.more", strings.Repeat("m", 600)},
	} {
		if r := advOp(t, &www, "", op...); r.Errno != syscall.ENOSPC {
			t.Errorf("www-data's %s at the limit: %v, want ENOSPC", op[0], r.Errno)
		}
	}
	freeAfter("other changes")
	if st := p.resStats(); st.NoSpace <= before {
		t.Errorf("Stats().NoSpace = %d (was %d): want the refused changes counted", st.NoSpace, before)
	}

	// Root is not bound: its mkdir works, and it writes 1 MiB.
	if err := os.Mkdir(p.path("root-dir"), 0o755); err != nil {
		t.Errorf("root's mkdir through the mount at www-data's limit: %v", err)
	}
	data := bytes.Repeat([]byte("root\n"), (1<<20)/5+1)
	if err := os.WriteFile(p.path("root-file"), data, 0o600); err != nil {
		t.Errorf("root writing 1 MiB through the mount after www-data's floods: %v", err)
	} else if b, err := os.ReadFile(filepath.Join(backing, "root-file")); err != nil || !bytes.Equal(b, data) {
		t.Errorf("root's file in BACKING: %d bytes, %v; want the %d bytes written", len(b), err, len(data))
	}
}
