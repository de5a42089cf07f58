package fs_test

// POSIX ACLs through the mount. With default_permissions
// the kernel checks access itself; unless the file system negotiates
// FUSE_POSIX_ACL it checks the mode bits only, so a named-user entry that
// denies www-data, or a mask that limits a named group, is ignored through
// the mount, and the kernel applies the caller's umask before the daemon
// creates an entry, so a default ACL is not inherited as on ext4.
//
// Every case compares the mount with BACKING (or a plain twin directory on
// the same file system) used directly by the same user: the outcome must be
// the same. ACLs are written and read as the raw xattrs
// system.posix_acl_access / system.posix_acl_default, so that the tests do
// not depend on setfacl/getfacl.

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
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

const (
	aclAccess  = "system.posix_acl_access"
	aclDefault = "system.posix_acl_default"

	aclUserObj  = 0x01
	aclUser     = 0x02
	aclGroupObj = 0x04
	aclGroup    = 0x08
	aclMask     = 0x10
	aclOther    = 0x20

	aclUndefinedID = 0xFFFFFFFF
	aclVersion     = 2
)

// aclEntry is one entry of a POSIX ACL as the kernel stores it in the
// xattr (struct posix_acl_xattr_entry).
type aclEntry struct {
	Tag  uint16
	Perm uint16
	ID   uint32
}

// aclParse reads the short text form "user::rw-,user:33:---,group::r--,
// group:33:rw-,mask::r--,other::---" (ids are numeric).
func aclParse(t testing.TB, text string) []aclEntry {
	t.Helper()
	var out []aclEntry
	for _, f := range strings.Split(text, ",") {
		p := strings.Split(f, ":")
		if len(p) != 3 || len(p[2]) != 3 {
			t.Fatalf("bad ACL entry %q", f)
		}
		e := aclEntry{ID: aclUndefinedID}
		for i, c := range p[2] {
			if c != '-' {
				if c != rune("rwx"[i]) {
					t.Fatalf("bad ACL perm %q", f)
				}
				e.Perm |= 4 >> i
			}
		}
		named := p[1] != ""
		switch p[0] {
		case "user":
			e.Tag = aclUserObj
			if named {
				e.Tag = aclUser
			}
		case "group":
			e.Tag = aclGroupObj
			if named {
				e.Tag = aclGroup
			}
		case "mask":
			e.Tag = aclMask
		case "other":
			e.Tag = aclOther
		default:
			t.Fatalf("bad ACL tag %q", f)
		}
		if named {
			if e.Tag != aclUser && e.Tag != aclGroup {
				t.Fatalf("bad ACL entry %q: only user and group take an id", f)
			}
			id, err := strconv.ParseUint(p[1], 10, 32)
			if err != nil {
				t.Fatalf("bad ACL id %q", f)
			}
			e.ID = uint32(id)
		}
		out = append(out, e)
	}
	return out
}

// aclEncode makes the xattr value: u32 version 2, then the entries sorted
// by tag and id (u16 tag, u16 perm, u32 id), little-endian.
func aclEncode(es []aclEntry) []byte {
	s := append([]aclEntry(nil), es...)
	sort.Slice(s, func(i, j int) bool {
		if s[i].Tag != s[j].Tag {
			return s[i].Tag < s[j].Tag
		}
		return s[i].ID < s[j].ID
	})
	b := binary.LittleEndian.AppendUint32(nil, aclVersion)
	for _, e := range s {
		b = binary.LittleEndian.AppendUint16(b, e.Tag)
		b = binary.LittleEndian.AppendUint16(b, e.Perm)
		b = binary.LittleEndian.AppendUint32(b, e.ID)
	}
	return b
}

// aclDecode parses an xattr value made by the kernel.
func aclDecode(b []byte) ([]aclEntry, error) {
	if len(b) < 4 || (len(b)-4)%8 != 0 {
		return nil, fmt.Errorf("ACL xattr of %d bytes", len(b))
	}
	if v := binary.LittleEndian.Uint32(b); v != aclVersion {
		return nil, fmt.Errorf("ACL xattr version %d", v)
	}
	var out []aclEntry
	for b = b[4:]; len(b) > 0; b = b[8:] {
		out = append(out, aclEntry{
			Tag:  binary.LittleEndian.Uint16(b),
			Perm: binary.LittleEndian.Uint16(b[2:]),
			ID:   binary.LittleEndian.Uint32(b[4:]),
		})
	}
	return out, nil
}

// aclText is the inverse of aclParse, for messages and comparisons.
func aclText(es []aclEntry) string {
	var parts []string
	for _, e := range es {
		id := ""
		if e.Tag == aclUser || e.Tag == aclGroup {
			id = strconv.FormatUint(uint64(e.ID), 10)
		}
		name := map[uint16]string{aclUserObj: "user", aclUser: "user", aclGroupObj: "group", aclGroup: "group",
			aclMask: "mask", aclOther: "other"}[e.Tag]
		if name == "" {
			name = fmt.Sprintf("tag%#x", e.Tag)
		}
		perm := []byte("---")
		for i := range 3 {
			if e.Perm&(4>>i) != 0 {
				perm[i] = "rwx"[i]
			}
		}
		parts = append(parts, name+":"+id+":"+string(perm))
	}
	return strings.Join(parts, ",")
}

// aclSet writes an ACL xattr (text form) directly, as root.
func aclSet(t testing.TB, path, name, text string) {
	t.Helper()
	if err := unix.Setxattr(path, name, aclEncode(aclParse(t, text)), 0); err != nil {
		t.Fatalf("setxattr %s %s: %v", path, name, err)
	}
}

// aclGet reads an ACL xattr in text form; "" when there is none.
func aclGet(t testing.TB, path, name string) string {
	t.Helper()
	buf := make([]byte, 4096)
	n, err := unix.Lgetxattr(path, name, buf)
	if errors.Is(err, unix.ENODATA) {
		return ""
	}
	if err != nil {
		t.Fatalf("getxattr %s %s: %v", path, name, err)
	}
	es, err := aclDecode(buf[:n])
	if err != nil {
		t.Fatalf("getxattr %s %s: %v", path, name, err)
	}
	return aclText(es)
}

// aclSupported skips (or, under CI, fails) unless the file system of dir
// stores POSIX ACLs.
func aclSupported(t testing.TB, dir string) {
	t.Helper()
	p := filepath.Join(dir, ".acl-probe")
	must(t, os.WriteFile(p, nil, 0o644))
	defer os.Remove(p)
	err := unix.Setxattr(p, aclAccess, aclEncode(aclParse(t, "user::rw-,user:1:r--,group::r--,mask::r--,other::r--")), 0)
	if err == nil {
		return
	}
	why := fmt.Sprintf("the file system of %s does not take POSIX ACLs: %v", dir, err)
	if os.Getenv("CI") != "" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// aclPerlOp: ops that advPerlOp has not, one per run, printing "OK [detail]"
// or "ERR <errno>":
//
//	setacl PATH NAME HEX      setxattr(PATH, NAME, bytes of HEX)
//	tmpfile DIR NAME MODE     open(DIR, O_TMPFILE|O_WRONLY, MODE), linkat it as DIR/NAME
//
// $ENV{UMASK}, when set, is the umask (octal).
const aclPerlOp = `
use strict; use Fcntl;
umask(oct($ENV{UMASK})) if defined $ENV{UMASK};
my ($op, @a) = @ARGV; my $ok; my $f;
if ($op eq 'setacl') { my $v = pack("H*", $a[2]); $ok = (syscall(188, $a[0], $a[1], $v, length($v), 0) == 0); }
elsif ($op eq 'tmpfile') {
  $ok = sysopen($f, $a[0], 020200000|O_WRONLY, oct($a[2]))
    && syscall(265, -100, "/proc/self/fd/" . fileno($f), -100, "$a[0]/$a[1]", 0x400) == 0
    && close($f); }
else { die "unknown op $op\n"; }
if ($ok) { print "OK\n"; } else { print "ERR " . ($!+0) . "\n"; }
`

// aclOp runs aclPerlOp as c with umask ("": inherited), bounded by 30 s.
func aclOp(t testing.TB, c *testfs.Cred, umask string, args ...string) syscall.Errno {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := execCmd(ctx, "perl", append([]string{"-e", aclPerlOp}, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	if umask != "" {
		cmd.Env = append(cmd.Env, "UMASK="+umask)
	}
	if c != nil {
		testfs.AsUser(cmd, *c)
	}
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("perl %q: killed after 30s (hung)", args)
	}
	line := strings.TrimSpace(string(out))
	if err != nil {
		t.Fatalf("perl %q: %v: %s", args, err, line)
	}
	if line == "OK" {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimPrefix(line, "ERR "))
	if err != nil || !strings.HasPrefix(line, "ERR ") {
		t.Fatalf("perl %q: bad output %q", args, line)
	}
	return syscall.Errno(n)
}

// aclErr names an errno for messages ("OK" for 0).
func aclErr(e syscall.Errno) string {
	if e == 0 {
		return "OK"
	}
	return fmt.Sprintf("%v (%d)", e, int(e))
}

// aclMount prepares BACKING (prep runs before the mount, as root) and mounts
// safefs over it, after checking that the file system takes ACLs.
func aclMount(t *testing.T, prep func(p *advPrepared)) *advPrepared {
	t.Helper()
	p := advNewDirs(t)
	aclSupported(t, p.Backing)
	prep(p)
	must(t, p.mount(t))
	return p
}

// aclChown is os.Chown that fails the test.
func aclChown(t testing.TB, path string, c testfs.Cred) {
	t.Helper()
	must(t, os.Chown(path, int(c.Uid), int(c.Gid)))
}

// TestAdvACLEnforced: files and directories whose ACL says something other
// than their mode bits, made directly in BACKING. Each access as www-data
// must have the same outcome through the mount as directly on BACKING.
// Today the mount checks the mode bits only: a named-user entry that denies
// www-data is ignored, a mask limiting a named group is ignored, and a
// named entry that grants more than the mode bits is refused.
func TestAdvACLEnforced(t *testing.T) {
	www := testfs.LookupUser(t, "www-data")
	w := strconv.FormatUint(uint64(www.Uid), 10)
	wg := strconv.FormatUint(uint64(www.Gid), 10)
	p := aclMount(t, func(p *advPrepared) {
		mk := func(name string, mode os.FileMode, gid int, acl string) {
			must(t, os.WriteFile(p.bpath(name), []byte(name+"\n"), mode))
			must(t, os.Chmod(p.bpath(name), mode))
			must(t, os.Chown(p.bpath(name), 0, gid))
			aclSet(t, p.bpath(name), aclAccess, acl)
		}
		// (a) 0644, but user:www-data:---.
		mk("denyuser", 0o644, 0, "user::rw-,user:"+w+":---,group::r--,mask::r--,other::r--")
		// (b) www-data is in a named group entry rw-, cut to r-- by the
		// mask; other has rw-. The matching group entry decides (POSIX
		// ACL check): no write, though the mode bits' "other" allow it.
		mk("maskgroup", 0o666, 0, "user::rw-,group::r--,group:"+wg+":rw-,mask::r--,other::rw-")
		// (b') the same with www-data's primary group as the owning group.
		mk("maskowngroup", 0o666, int(www.Gid), "user::rw-,group::rw-,mask::r--,other::rw-")
		// (c) 0600 root, but user:www-data:r--.
		mk("grantuser", 0o600, 0, "user::rw-,user:"+w+":r--,group::---,mask::r--,other::---")
		// Directories: one that denies www-data search, one that lets it create.
		must(t, os.Mkdir(p.bpath("denydir"), 0o755))
		must(t, os.WriteFile(p.bpath("denydir", "file"), []byte("inside\n"), 0o644))
		aclSet(t, p.bpath("denydir"), aclAccess, "user::rwx,user:"+w+":---,group::r-x,mask::r-x,other::r-x")
		must(t, os.Mkdir(p.bpath("grantdir"), 0o755))
		aclSet(t, p.bpath("grantdir"), aclAccess, "user::rwx,user:"+w+":rwx,group::r-x,mask::rwx,other::r-x")
	})

	cases := []struct {
		name string
		want syscall.Errno // what BACKING says (checked: else the test is wrong)
		args []string      // %s: the mount or BACKING; %n: "m" or "d" (distinct names)
	}{
		{"a read 0644 file with user:www-data:---", syscall.EACCES, []string{"read", "%s/denyuser"}},
		{"b write through named group entry masked to r--", syscall.EACCES, []string{"wronly", "%s/maskgroup", "x"}},
		{"b read through named group entry masked to r--", 0, []string{"read", "%s/maskgroup"}},
		{"b' write through owning group masked to r--", syscall.EACCES, []string{"wronly", "%s/maskowngroup", "x"}},
		{"c read 0600 root file with user:www-data:r--", 0, []string{"read", "%s/grantuser"}},
		{"c write 0600 root file with user:www-data:r--", syscall.EACCES, []string{"wronly", "%s/grantuser", "x"}},
		{"read in a directory with user:www-data:---", syscall.EACCES, []string{"read", "%s/denydir/file"}},
		{"create in a directory with user:www-data:---", syscall.EACCES, []string{"create", "%s/denydir/new-%n", "0644"}},
		{"create in a root 0755 directory with user:www-data:rwx", 0, []string{"create", "%s/grantdir/new-%n", "0644"}},
		{"mkdir in a root 0755 directory with user:www-data:rwx", 0, []string{"mkdir", "%s/grantdir/dir-%n", "0755"}},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			sub := func(root, n string) []string {
				out := make([]string, len(c.args))
				for i, a := range c.args {
					out[i] = strings.ReplaceAll(strings.ReplaceAll(a, "%s", root), "%n", n)
				}
				return out
			}
			direct := advOp(t, &www, "022", sub(p.Backing, "d")...)
			if direct.Errno != c.want {
				t.Fatalf("the test is wrong: on BACKING %v gives %s, want %s", sub(p.Backing, "d"), aclErr(direct.Errno), aclErr(c.want))
			}
			viaMount := advOp(t, &www, "022", sub(p.Dir, "m")...)
			if viaMount.Errno != direct.Errno {
				t.Errorf("as www-data %v: through the mount %s, on BACKING directly %s: the mount does not enforce the ACL",
					c.args, aclErr(viaMount.Errno), aclErr(direct.Errno))
			}
		})
	}
	// An ACL changed directly in BACKING while mounted, after the mount
	// has used the file: what BACKING grants now is what the mount grants.
	t.Run("changed_directly_in_BACKING", func(t *testing.T) {
		for _, acl := range []struct {
			text string
			want syscall.Errno
		}{
			{"user::rw-,user:" + w + ":r--,group::r--,mask::r--,other::---", 0},
			{"user::rw-,user:" + w + ":---,group::r--,mask::r--,other::r--", syscall.EACCES},
			{"user::rw-,user:" + w + ":r--,group::---,mask::r--,other::---", 0},
		} {
			aclSet(t, p.bpath("denyuser"), aclAccess, acl.text)
			direct := advOp(t, &www, "", "read", p.bpath("denyuser"))
			if direct.Errno != acl.want {
				t.Fatalf("the test is wrong: with %s, www-data's read on BACKING gives %s", acl.text, aclErr(direct.Errno))
			}
			// The kernel may keep the file's attributes and ACL for
			// their TTL (1 s, as on go-fuse's loopback): a change made
			// directly in BACKING must show once that has passed (the
			// minute guards against a hang only).
			var viaMount advOpResult
			for end := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
				if viaMount = advOp(t, &www, "", "read", p.path("denyuser")); viaMount.Errno == direct.Errno || time.Now().After(end) {
					break
				}
			}
			if viaMount.Errno != direct.Errno {
				t.Errorf("ACL %s set directly in BACKING: a minute later www-data's read through the mount %s, directly %s",
					acl.text, aclErr(viaMount.Errno), aclErr(direct.Errno))
			}
		}
	})
	// Nothing that was refused changed the files.
	for _, n := range []string{"maskgroup", "maskowngroup", "grantuser"} {
		if b, err := os.ReadFile(p.bpath(n)); err != nil || string(b) != n+"\n" {
			t.Errorf("%s now holds %q (%v), want %q", n, b, err, n+"\n")
		}
	}
}

// TestAdvACLSetThroughMount: an ACL set through the mount, by the file's
// owner, is enforced through the mount, as it is directly. www-data owns a
// world-readable file and removes read for user nobody with
// user:nobody:---; nobody's read must then fail through the mount. Setting
// an ACL on a file one does not own must fail (EPERM) as directly: the
// daemon is root, it must not set it on the caller's behalf.
func TestAdvACLSetThroughMount(t *testing.T) {
	www := testfs.LookupUser(t, "www-data")
	nobody := testfs.LookupUser(t, "nobody")
	nb := strconv.FormatUint(uint64(nobody.Uid), 10)
	p := aclMount(t, func(p *advPrepared) {
		must(t, os.Mkdir(p.bpath("wdir"), 0o755))
		aclChown(t, p.bpath("wdir"), www)
		for _, n := range []string{"m", "d", "rootm", "rootd"} {
			must(t, os.WriteFile(p.bpath("wdir", n), []byte("www's "+n+"\n"), 0o644))
			must(t, os.Chmod(p.bpath("wdir", n), 0o644))
		}
		for _, n := range []string{"m", "d"} {
			aclChown(t, p.bpath("wdir", n), www)
		}
	})
	deny := "user::rw-,user:" + nb + ":---,group::r--,mask::r--,other::r--"
	denyHex := hex.EncodeToString(aclEncode(aclParse(t, deny)))

	// Set by the owner: through the mount on wdir/m, directly on wdir/d.
	em := aclOp(t, &www, "", "setacl", p.path("wdir", "m"), aclAccess, denyHex)
	ed := aclOp(t, &www, "", "setacl", p.bpath("wdir", "d"), aclAccess, denyHex)
	if ed != 0 {
		t.Fatalf("the test is wrong: the owner's setxattr %s directly gives %s", aclAccess, aclErr(ed))
	}
	if em != 0 {
		t.Fatalf("the owner's setxattr %s through the mount gives %s, directly OK", aclAccess, aclErr(em))
	}
	if got := aclGet(t, p.bpath("wdir", "m"), aclAccess); got != deny {
		t.Errorf("ACL set through the mount: BACKING holds %q, want %q", got, deny)
	}
	rm := advOp(t, &nobody, "", "read", p.path("wdir", "m"))
	rd := advOp(t, &nobody, "", "read", p.bpath("wdir", "d"))
	if rd.Errno != syscall.EACCES {
		t.Fatalf("the test is wrong: nobody's read directly gives %s, want EACCES", aclErr(rd.Errno))
	}
	if rm.Errno != rd.Errno {
		t.Errorf("after www-data set user:nobody:--- through the mount, nobody's read through the mount gives %s, directly %s: the ACL is not enforced",
			aclErr(rm.Errno), aclErr(rd.Errno))
	}
	// www-data (the owner) still reads it.
	if r := advOp(t, &www, "", "read", p.path("wdir", "m")); r.Errno != 0 {
		t.Errorf("the owner's read through the mount after setting the ACL: %s", aclErr(r.Errno))
	}

	// chmod by the owner of a file with an ACL: the kernel on ext4 moves the
	// group bits into the mask; through the mount the result is the same.
	if e := advOp(t, &www, "", "chmod", p.path("wdir", "m"), "0600").Errno; e != 0 {
		t.Errorf("the owner's chmod through the mount: %s", aclErr(e))
	}
	if e := advOp(t, &www, "", "chmod", p.bpath("wdir", "d"), "0600").Errno; e != 0 {
		t.Fatalf("the test is wrong: the owner's chmod directly: %s", aclErr(e))
	}
	if got, want := aclDescribe(t, p.bpath("wdir", "m")), aclDescribe(t, p.bpath("wdir", "d")); got != want {
		t.Errorf("after chmod 0600 through the mount: %+v; directly: %+v", got, want)
	}

	// Not the owner: www-data on root's files in its own directory.
	grant := "user::rw-,user:" + strconv.FormatUint(uint64(www.Uid), 10) + ":rw-,group::r--,mask::rw-,other::rw-"
	grantHex := hex.EncodeToString(aclEncode(aclParse(t, grant)))
	em = aclOp(t, &www, "", "setacl", p.path("wdir", "rootm"), aclAccess, grantHex)
	ed = aclOp(t, &www, "", "setacl", p.bpath("wdir", "rootd"), aclAccess, grantHex)
	if ed != syscall.EPERM {
		t.Fatalf("the test is wrong: setxattr %s on root's file as www-data directly gives %s, want EPERM", aclAccess, aclErr(ed))
	}
	if em != ed {
		t.Errorf("setxattr %s on root's file as www-data: through the mount %s, directly %s", aclAccess, aclErr(em), aclErr(ed))
	}
	st := advLstat(t, p.bpath("wdir", "rootm"))
	if got := aclGet(t, p.bpath("wdir", "rootm"), aclAccess); got != "" || st.Mode&0o7777 != 0o644 {
		t.Errorf("root's file after www-data's refused setxattr: ACL %q, mode %#o; want none, 0644", got, st.Mode&0o7777)
	}
}

// aclNode describes a new entry for comparison between the mount and a
// plain twin directory.
type aclNode struct {
	Mode     uint32
	Uid, Gid uint32
	Access   string
	Default  string
}

func aclDescribe(t testing.TB, path string) aclNode {
	t.Helper()
	st := advLstat(t, path)
	return aclNode{Mode: st.Mode, Uid: st.Uid, Gid: st.Gid, Access: aclGet(t, path, aclAccess), Default: aclGet(t, path, aclDefault)}
}

// TestAdvACLDefaultInherited: a directory with a default ACL. www-data,
// with umask 022, creates a file (0666), a directory (0777), a FIFO (0666)
// and an O_TMPFILE file linked in (0666), through the mount and in a twin
// directory on the same file system used directly. The kernel on ext4
// ignores the umask when the parent has a default ACL and derives the new
// entry's ACL from it: modes and ACLs (access and default) must be the same
// through the mount. Today the kernel applies the umask before the daemon
// sees the create (no FUSE_POSIX_ACL), so the mask loses w. In a directory
// without a default ACL the umask applies (027 here), also through the mount.
func TestAdvACLDefaultInherited(t *testing.T) {
	www := testfs.LookupUser(t, "www-data")
	w := strconv.FormatUint(uint64(www.Uid), 10)
	def := "user::rwx,user:" + w + ":rwx,group::r-x,mask::rwx,other::---"
	var twin string
	p := aclMount(t, func(p *advPrepared) {
		twin = filepath.Join(filepath.Dir(p.Backing), "twin")
		must(t, os.Mkdir(twin, 0o755))
		for _, root := range []string{p.Backing, twin} {
			for _, d := range []string{"inh", "plain"} {
				must(t, os.Mkdir(filepath.Join(root, d), 0o755))
				must(t, os.Chmod(filepath.Join(root, d), 0o755))
				aclChown(t, filepath.Join(root, d), www)
			}
			aclSet(t, filepath.Join(root, "inh"), aclDefault, def)
		}
	})
	if got := aclGet(t, filepath.Join(twin, "inh"), aclDefault); got != def {
		t.Fatalf("the test is wrong: twin's default ACL reads %q, want %q", got, def)
	}

	type mkOp struct {
		name  string
		umask string
		do    func(root string) syscall.Errno
	}
	ops := []mkOp{}
	for _, d := range []struct{ dir, umask string }{{"inh", "022"}, {"plain", "027"}} {
		ops = append(ops,
			mkOp{d.dir + "/file", d.umask, func(root string) syscall.Errno {
				return advOp(t, &www, d.umask, "create", filepath.Join(root, d.dir, "file"), "0666").Errno
			}},
			mkOp{d.dir + "/dir", d.umask, func(root string) syscall.Errno {
				return advOp(t, &www, d.umask, "mkdir", filepath.Join(root, d.dir, "dir"), "0777").Errno
			}},
			mkOp{d.dir + "/fifo", d.umask, func(root string) syscall.Errno {
				return advOp(t, &www, d.umask, "mkfifo", filepath.Join(root, d.dir, "fifo"), "0666").Errno
			}},
			mkOp{d.dir + "/tmpfile", d.umask, func(root string) syscall.Errno {
				return aclOp(t, &www, d.umask, "tmpfile", filepath.Join(root, d.dir), "tmpfile", "0666")
			}},
		)
	}
	for _, o := range ops {
		t.Run(strings.ReplaceAll(o.name, "/", "_"), func(t *testing.T) {
			if e := o.do(twin); e != 0 {
				t.Fatalf("the test is wrong: as www-data, making %s in the plain twin gives %s", o.name, aclErr(e))
			}
			if e := o.do(p.Dir); e != 0 {
				t.Fatalf("as www-data, making %s through the mount gives %s; in the plain twin OK", o.name, aclErr(e))
			}
			want := aclDescribe(t, filepath.Join(twin, o.name))
			got := aclDescribe(t, p.bpath(o.name))
			if got != want {
				t.Errorf("%s made by www-data (umask %s) through the mount: mode %#o uid %d gid %d\n  access ACL  %q\n  default ACL %q\n"+
					"made directly in a twin directory: mode %#o uid %d gid %d\n  access ACL  %q\n  default ACL %q",
					o.name, o.umask, got.Mode, got.Uid, got.Gid, got.Access, got.Default,
					want.Mode, want.Uid, want.Gid, want.Access, want.Default)
			}
			// What the mount shows is what BACKING holds.
			if viaMount := aclDescribe(t, p.path(o.name)); viaMount != got {
				t.Errorf("%s seen through the mount: %+v; BACKING holds %+v", o.name, viaMount, got)
			}
		})
	}
}
