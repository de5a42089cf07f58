package fs_test

// Internal directory takeover. BACKING's top directory
// belongs to www-data in the common deployment, so www-data can rename
// root's BACKING/.safefs aside (a rename within one directory needs no
// permission on the directory moved) and put its own .safefs there. The
// daemon must not trust an internal directory, or anything in it, that is
// not its own user's with no group/other write access: such a directory
// is quarantined (renamed to ".safefs.untrusted-*" in BACKING, never read
// nor replayed), a warning is logged, and a fresh 0700 .safefs is made.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/testfs"
)

const (
	tkoQuarantinePrefix = ".safefs.untrusted-"
	tkoUndoName         = "0123456789abcdef0123456789abcdef"
	tkoRootCfg          = "root's configuration: admin_password_hash=$6$legit\n"
	tkoEvilCfg          = "attacker's configuration: admin_password_hash=$6$pwned\n"
)

// tkoSetup is a BACKING owned by www-data (0755, as a web server's data
// directory is) holding conf/app.cfg, root's 0644 file, in conf/ owned by
// confOwner, and root's own internal directory as a clean unmount left it.
type tkoSetup struct {
	p   *advPrepared
	www testfs.Cred
	obs *observer.ObservedLogs
}

func tkoNew(t *testing.T, confOwner string) *tkoSetup {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount and to act as www-data")
	}
	www := testfs.LookupUser(t, "www-data")
	p := advNewDirs(t)
	must(t, os.Chown(p.Backing, int(www.Uid), int(www.Gid)))
	must(t, os.Mkdir(p.bpath("conf"), 0o755))
	if confOwner == "www-data" {
		must(t, os.Chown(p.bpath("conf"), int(www.Uid), int(www.Gid)))
	}
	must(t, os.WriteFile(p.bpath("conf", "app.cfg"), []byte(tkoRootCfg), 0o644))
	must(t, os.Chmod(p.bpath("conf", "app.cfg"), 0o644))
	tkoRootInternal(t, p.Backing)
	return &tkoSetup{p: p, www: www}
}

// tkoRootInternal makes BACKING/.safefs as a clean unmount leaves it:
// root's, 0700, with staging/ undo/ rejected/ (0700), an empty journal
// and the lock file (0600).
func tkoRootInternal(t *testing.T, backing string) string {
	t.Helper()
	in := advInternal(t, backing)
	for _, f := range []string{"journal", "lock"} {
		must(t, os.WriteFile(filepath.Join(in, f), nil, 0o600))
	}
	return in
}

// as runs one advPerlOp as www-data and fails the test unless it works:
// these are the steps of the attack that work today and after the fix
// (they touch only what www-data owns).
func (s *tkoSetup) as(t *testing.T, args ...string) {
	t.Helper()
	if r := advOp(t, &s.www, "022", args...); r.Errno != 0 {
		t.Fatalf("www-data %q: %v (the attack's setup step must work)", args, r.Errno)
	}
}

// tkoInplaceAttack is a journal line, framed with a valid checksum, of a cut-off
// inplace commit of target whose undo copy (tkoUndoName, holding undo)
// verifies by size and CRC and whose inode number is the target's: today's
// recovery writes undo over target.
func tkoInplaceAttack(t *testing.T, backing, target string, undo []byte) []byte {
	t.Helper()
	st := advLstat(t, filepath.Join(backing, target))
	return advJournalLine(t, map[string]any{"id": 7, "kind": "inplace", "target": target,
		"dev": st.Dev, "ino": st.Ino, "old_size": st.Size,
		"undo": tkoUndoName, "undo_size": len(undo), "undo_crc": advCRC(undo)})
}

// plant is the takeover as www-data: root's .safefs is renamed aside, and
// www-data's own .safefs (mode dirMode) with staging/ undo/ rejected/, the
// undo file and the journal takes its place. It returns the planted
// directory's inode number.
func (s *tkoSetup) plant(t *testing.T, dirMode string, journal, undo []byte) uint64 {
	t.Helper()
	p := s.p
	s.as(t, "rename", p.bpath(fs.InternalDir), p.bpath(".root-safefs-moved-aside"))
	in := p.bpath(fs.InternalDir)
	s.as(t, "mkdir", in, "0755")
	for _, d := range []string{"staging", "undo", "rejected"} {
		s.as(t, "mkdir", filepath.Join(in, d), "0755")
	}
	if undo != nil {
		s.as(t, "write", filepath.Join(in, "undo", tkoUndoName), string(undo))
	}
	if journal != nil {
		s.as(t, "write", filepath.Join(in, "journal"), string(journal))
	}
	s.as(t, "chmod", in, dirMode)
	st := advLstat(t, in)
	if st.Uid != s.www.Uid {
		t.Fatalf("planted %s belongs to uid %d, want www-data's", in, st.Uid)
	}
	return st.Ino
}

// logs returns a mount option edit that also records the log, for
// checkWarned.
func (s *tkoSetup) logs(t *testing.T) func(*fs.Options) {
	return func(o *fs.Options) {
		core, obs := observer.New(zapcore.DebugLevel)
		s.obs = obs
		o.Log = zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), core))
	}
}

// options are fs.DefaultOptions with the recording logger (for fs.Recover).
func (s *tkoSetup) options(t *testing.T) fs.Options {
	o := fs.DefaultOptions()
	s.logs(t)(&o)
	return o
}

// checkWarned requires a warning (or worse) about the quarantine: one that
// names the untrusted directory or says it was quarantined.
func (s *tkoSetup) checkWarned(t *testing.T) {
	t.Helper()
	if s.obs == nil {
		t.Fatal("no log recorded")
	}
	for _, e := range s.obs.All() {
		if e.Level < zapcore.WarnLevel {
			continue
		}
		text := strings.ToLower(e.Message + " " + fmt.Sprint(e.ContextMap()))
		if strings.Contains(text, "untrusted") || strings.Contains(text, "quarantin") {
			return
		}
	}
	t.Errorf("no warning logged about the untrusted internal directory (want a warn/error entry naming %q or saying \"quarantined\")",
		tkoQuarantinePrefix+"*")
}

// tkoQuarantined lists BACKING's entries named .safefs.untrusted-*.
func tkoQuarantined(t *testing.T, backing string) []string {
	t.Helper()
	ents, err := os.ReadDir(backing)
	must(t, err)
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tkoQuarantinePrefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// tkoCheckQuarantined requires that the entry whose inode is planted now
// lives under a .safefs.untrusted-* name in BACKING's top directory, and
// that BACKING/.safefs is a fresh directory: another inode, root's, 0700,
// with root's 0700 staging/ undo/ rejected/ and no group/other-writable
// or foreign entry.
func tkoCheckQuarantined(t *testing.T, backing string, planted uint64) {
	t.Helper()
	q := tkoQuarantined(t, backing)
	found := false
	for _, n := range q {
		if advLstat(t, filepath.Join(backing, n)).Ino == planted {
			found = true
		}
	}
	if !found {
		names, _ := os.ReadDir(backing)
		var all []string
		for _, e := range names {
			all = append(all, e.Name())
		}
		t.Errorf("the untrusted internal directory (inode %d) was not quarantined under a %q name; BACKING holds %q",
			planted, tkoQuarantinePrefix+"*", all)
	}
	tkoCheckFresh(t, backing, planted)
}

// tkoCheckFresh requires BACKING/.safefs to be root's own 0700 directory
// (not the inode planted), with root's 0700 parts.
func tkoCheckFresh(t *testing.T, backing string, planted uint64) {
	t.Helper()
	in := filepath.Join(backing, fs.InternalDir)
	var st unix.Stat_t
	if err := unix.Lstat(in, &st); err != nil {
		t.Errorf("BACKING/.safefs after mount: %v", err)
		return
	}
	if st.Ino == planted {
		t.Errorf("BACKING/.safefs is still the untrusted directory (inode %d, uid %d, mode %o): it was used, not quarantined",
			st.Ino, st.Uid, st.Mode&0o7777)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != 0 || st.Mode&0o7777 != 0o700 {
		t.Errorf("BACKING/.safefs: type %o uid %d mode %o, want a directory of root's, 0700",
			st.Mode&unix.S_IFMT, st.Uid, st.Mode&0o7777)
	}
	for _, d := range []string{"staging", "undo", "rejected"} {
		var sst unix.Stat_t
		if err := unix.Lstat(filepath.Join(in, d), &sst); err != nil {
			t.Errorf("BACKING/.safefs/%s: %v", d, err)
			continue
		}
		if sst.Mode&unix.S_IFMT != unix.S_IFDIR || sst.Uid != 0 || sst.Mode&0o022 != 0 {
			t.Errorf("BACKING/.safefs/%s: type %o uid %d mode %o, want root's directory with no group/other write",
				d, sst.Mode&unix.S_IFMT, sst.Uid, sst.Mode&0o7777)
		}
	}
}

// checkCfg requires conf/app.cfg to be root's bytes, still root's file.
func (s *tkoSetup) checkCfg(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(s.p.bpath("conf", "app.cfg"))
	must(t, err)
	if string(b) != tkoRootCfg {
		t.Errorf("root's conf/app.cfg was overwritten from the planted internal directory: %q, want %q", b, tkoRootCfg)
	}
	if st := advLstat(t, s.p.bpath("conf", "app.cfg")); st.Uid != 0 {
		t.Errorf("conf/app.cfg now belongs to uid %d", st.Uid)
	}
}

// checkMountWorks commits a file through the mount and reads it in BACKING.
func (s *tkoSetup) checkMountWorks(t *testing.T) {
	t.Helper()
	want := []byte("committed after the quarantine\n")
	if err := os.WriteFile(s.p.path("conf", "after.txt"), want, 0o644); err != nil {
		t.Errorf("write through the mount: %v", err)
		return
	}
	if b, err := os.ReadFile(s.p.bpath("conf", "after.txt")); err != nil || !bytes.Equal(b, want) {
		t.Errorf("commit through the mount: BACKING/conf/after.txt = %q, %v; want %q", b, err, want)
	}
}

// TestAdvInternalTakeoverRecovery: www-data renames root's .safefs aside
// and plants its own, with a cut-off inplace record for conf/app.cfg (root's
// 0644 file) and an undo copy of attacker bytes that verifies. Today the
// next mount (or `safefs recover`) "rolls back" app.cfg to the attacker's
// bytes. Expected: the planted directory is quarantined before recovery
// reads anything, app.cfg is root's, a fresh root 0700 .safefs is used, a
// warning is logged, and the mount works.
func TestAdvInternalTakeoverRecovery(t *testing.T) {
	for _, via := range []string{"mount", "recover"} {
		for _, confOwner := range []string{"root", "www-data"} {
			for _, dirMode := range []string{"0755", "0700"} {
				t.Run(fmt.Sprintf("%s/conf_%s/planted_%s", via, confOwner, dirMode), func(t *testing.T) {
					s := tkoNew(t, confOwner)
					undo := []byte(tkoEvilCfg)
					journal := tkoInplaceAttack(t, s.p.Backing, "conf/app.cfg", undo)
					planted := s.plant(t, dirMode, journal, undo)

					if via == "mount" {
						if err := s.p.mount(t, s.logs(t)); err != nil {
							t.Fatalf("mount over BACKING with a planted .safefs: %v", err)
						}
					} else {
						sum, err := fs.Recover(s.p.Backing, s.options(t))
						if err != nil {
							t.Fatalf("fs.Recover over BACKING with a planted .safefs: %v", err)
						}
						t.Logf("recover summary: %+v", sum)
					}
					s.checkCfg(t)
					tkoCheckQuarantined(t, s.p.Backing, planted)
					s.checkWarned(t)
					// The quarantined directory is never replayed nor swept.
					for _, n := range tkoQuarantined(t, s.p.Backing) {
						if _, err := os.Lstat(filepath.Join(s.p.Backing, n, "undo", tkoUndoName)); err != nil {
							t.Errorf("quarantined %s lost its undo file (%v): it was acted on", n, err)
						}
						if b, _ := os.ReadFile(filepath.Join(s.p.Backing, n, "journal")); !bytes.Equal(b, journal) {
							t.Errorf("quarantined %s journal changed (%d bytes, want %d): it was acted on", n, len(b), len(journal))
						}
					}
					if via == "mount" {
						s.checkMountWorks(t)
					}
				})
			}
		}
	}
}

// tkoFlockHolder starts, as c, a Perl process that takes an exclusive flock
// on path (creating it) and sleeps; it returns once the lock is held. The
// process is killed in cleanup.
func tkoFlockHolder(t *testing.T, c testfs.Cred, path string) {
	t.Helper()
	const script = `use strict; use Fcntl qw(:flock); $| = 1;
open(my $f, '>>', $ARGV[0]) or die "open $ARGV[0]: $!\n";
flock($f, LOCK_EX | LOCK_NB) or die "flock: $!\n";
print "locked\n"; sleep 3600;`
	cmd := exec.Command("perl", "-e", script, path)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	testfs.AsUser(cmd, c)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	got := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		got <- l
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case l := <-got:
		if l != "locked\n" {
			_ = cmd.Process.Kill()
			t.Fatalf("flock holder: %q %s", l, errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("flock holder did not take the lock: %s", errb.String())
	}
}

// TestAdvInternalTakeoverLock: www-data plants its own .safefs with a lock
// file and holds a flock on it. Today fs.Mount (and `safefs mount`, exit 6)
// fails with ErrBusy for as long as www-data likes. Expected: the planted
// directory is quarantined and the mount succeeds.
func TestAdvInternalTakeoverLock(t *testing.T) {
	for _, via := range []string{"mount", "recover"} {
		t.Run(via, func(t *testing.T) {
			s := tkoNew(t, "root")
			planted := s.plant(t, "0700", nil, nil)
			tkoFlockHolder(t, s.www, s.p.bpath(fs.InternalDir, "lock"))

			var err error
			if via == "mount" {
				err = advMountBounded(t, s.p)
			} else {
				_, err = fs.Recover(s.p.Backing, s.options(t))
			}
			if err != nil {
				t.Fatalf("%s with www-data holding a flock on its planted .safefs/lock: %v (fs.ErrBusy: %v)",
					via, err, errors.Is(err, fs.ErrBusy))
			}
			tkoCheckQuarantined(t, s.p.Backing, planted)
			if via == "mount" {
				s.checkMountWorks(t)
			}
		})
	}
}

// TestAdvInternalUntrustedParts: an internal directory that is root's but
// group/other-writable, or root's with a part (journal, lock, undo/,
// staging/) that is www-data's or group/other-writable, is quarantined too:
// whoever could write there could have planted what recovery acts on. The
// cases carry the app.cfg attack where it fits. A root-owned 0755 .safefs
// (no group/other write) is accepted, tightened to 0700 and replayed.
func TestAdvInternalUntrustedParts(t *testing.T) {
	www := func(s *tkoSetup, p string) error { return os.Lchown(p, int(s.www.Uid), int(s.www.Gid)) }
	type tamper func(t *testing.T, s *tkoSetup, in string)
	// Each case starts from root's 0700 .safefs holding the attack (journal
	// record and verifying undo file, both root's 0600), then tampers.
	cases := map[string]tamper{
		"dir_0777": func(t *testing.T, s *tkoSetup, in string) { must(t, os.Chmod(in, 0o777)) },
		"dir_0770": func(t *testing.T, s *tkoSetup, in string) { must(t, os.Chmod(in, 0o770)) },
		"dir_owned_by_www-data": func(t *testing.T, s *tkoSetup, in string) {
			must(t, www(s, in))
		},
		"journal_owned_by_www-data": func(t *testing.T, s *tkoSetup, in string) {
			must(t, www(s, filepath.Join(in, "journal")))
		},
		"journal_0666": func(t *testing.T, s *tkoSetup, in string) {
			must(t, os.Chmod(filepath.Join(in, "journal"), 0o666))
		},
		"lock_owned_by_www-data": func(t *testing.T, s *tkoSetup, in string) {
			must(t, www(s, filepath.Join(in, "lock")))
		},
		"undo_dir_owned_by_www-data": func(t *testing.T, s *tkoSetup, in string) {
			must(t, www(s, filepath.Join(in, "undo")))
			must(t, www(s, filepath.Join(in, "undo", tkoUndoName)))
		},
		"staging_dir_0777": func(t *testing.T, s *tkoSetup, in string) {
			must(t, os.Chmod(filepath.Join(in, "staging"), 0o777))
		},
		"rejected_dir_owned_by_www-data": func(t *testing.T, s *tkoSetup, in string) {
			must(t, www(s, filepath.Join(in, "rejected")))
		},
	}
	for name, tamper := range cases {
		t.Run(name, func(t *testing.T) {
			s := tkoNew(t, "root")
			in := s.p.bpath(fs.InternalDir)
			undo := []byte(tkoEvilCfg)
			must(t, os.WriteFile(filepath.Join(in, "undo", tkoUndoName), undo, 0o600))
			must(t, os.WriteFile(filepath.Join(in, "journal"),
				tkoInplaceAttack(t, s.p.Backing, "conf/app.cfg", undo), 0o600))
			tamper(t, s, in)
			planted := advLstat(t, in).Ino
			if err := advMountBounded(t, s.p); err != nil {
				t.Fatalf("mount: %v", err)
			}
			s.checkCfg(t)
			tkoCheckQuarantined(t, s.p.Backing, planted)
			s.checkMountWorks(t)
		})
	}

	// Root's own 0755 .safefs (no group/other write), everything in it
	// root's: trusted. It is tightened to 0700, not quarantined, and its
	// cut-off inplace record of a root file is rolled back from its undo.
	t.Run("root_dir_0755_accepted", func(t *testing.T) {
		s := tkoNew(t, "root")
		in := s.p.bpath(fs.InternalDir)
		must(t, os.Chmod(in, 0o755))
		must(t, os.Mkdir(s.p.bpath("data"), 0o755))
		old := []byte("old whole version\n")
		must(t, os.WriteFile(s.p.bpath("data", "f"), []byte("new version, half wri"), 0o644))
		must(t, os.WriteFile(filepath.Join(in, "undo", tkoUndoName), old, 0o600))
		must(t, os.WriteFile(filepath.Join(in, "journal"), tkoInplaceAttack(t, s.p.Backing, "data/f", old), 0o600))
		ino := advLstat(t, in).Ino
		if err := advMountBounded(t, s.p); err != nil {
			t.Fatalf("mount: %v", err)
		}
		if q := tkoQuarantined(t, s.p.Backing); len(q) != 0 {
			t.Errorf("root's own 0755 internal directory was quarantined (%q): only group/other write or a foreign owner makes it untrusted", q)
		}
		st := advLstat(t, in)
		if st.Ino != ino || st.Mode&0o7777 != 0o700 || st.Uid != 0 {
			t.Errorf("BACKING/.safefs: inode %d (was %d) mode %o uid %d, want the same directory tightened to 0700",
				st.Ino, ino, st.Mode&0o7777, st.Uid)
		}
		if b, _ := os.ReadFile(s.p.bpath("data", "f")); !bytes.Equal(b, old) {
			t.Errorf("the cut-off inplace commit was not rolled back: data/f = %q, want %q", b, old)
		}
		s.checkMountWorks(t)
	})
}

// TestAdvInternalSymlink: www-data replaces .safefs by a symlink to a
// directory of its own (with a journal and undo file aimed at
// conf/app.cfg). The symlink must not be followed (nothing in the
// directory it points to is read, replayed or swept), and it must not stop
// the mount either: it is quarantined (the symlink itself renamed) and a
// fresh .safefs is made.
func TestAdvInternalSymlink(t *testing.T) {
	for _, where := range []string{"inside_backing", "outside_backing"} {
		t.Run(where, func(t *testing.T) {
			s := tkoNew(t, "root")
			p := s.p
			s.as(t, "rename", p.bpath(fs.InternalDir), p.bpath(".root-safefs-moved-aside"))
			evil := p.bpath("evil")
			if where == "outside_backing" {
				// A www-data directory next to BACKING (the web server's
				// own files elsewhere).
				d := filepath.Join(filepath.Dir(p.Backing), "wwwhome")
				must(t, os.Mkdir(d, 0o755))
				must(t, os.Chown(d, int(s.www.Uid), int(s.www.Gid)))
				evil = filepath.Join(d, "evil")
			}
			undo := []byte(tkoEvilCfg)
			journal := tkoInplaceAttack(t, p.Backing, "conf/app.cfg", undo)
			s.as(t, "mkdir", evil, "0755")
			for _, d := range []string{"staging", "undo", "rejected"} {
				s.as(t, "mkdir", filepath.Join(evil, d), "0755")
			}
			s.as(t, "write", filepath.Join(evil, "undo", tkoUndoName), string(undo))
			s.as(t, "write", filepath.Join(evil, "staging", tkoUndoName), "orphan staging file")
			s.as(t, "write", filepath.Join(evil, "journal"), string(journal))
			s.as(t, "symlink", evil, p.bpath(fs.InternalDir))
			link := advLstat(t, p.bpath(fs.InternalDir)).Ino
			before := advSnapshot(t, evil)
			for k, e := range before { // the daemon's own listing may move atimes; contents may not change
				e.Atime = unix.Timespec{}
				before[k] = e
			}

			err := advMountBounded(t, p)
			after := advSnapshot(t, evil)
			for k, e := range after {
				e.Atime = unix.Timespec{}
				after[k] = e
			}
			advSameTree(t, "the directory .safefs pointed to", before, after)
			s.checkCfg(t)
			if err != nil {
				t.Fatalf("mount with BACKING/.safefs a symlink to a www-data directory: %v (it must be quarantined, not stop the mount)", err)
			}
			tkoCheckQuarantined(t, p.Backing, link)
			for _, n := range tkoQuarantined(t, p.Backing) {
				if st := advLstat(t, filepath.Join(p.Backing, n)); st.Ino == link && st.Mode&unix.S_IFMT != unix.S_IFLNK {
					t.Errorf("quarantined %s is not the symlink itself (mode %o)", n, st.Mode)
				}
			}
			s.checkMountWorks(t)
		})
	}
}
