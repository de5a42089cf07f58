package fs_test

// Internal directory takeover by swapping names while the daemon runs
// (see internaldir_trust_test.go).

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/testfs"
)

// tkoSwapStaging is the second half of the takeover, as www-data: in
// BACKING/.safefs/staging (the attacker's own, if it planted .safefs), it
// writes its own file and renames it over every staging file there. It
// prints "OK n" (n files replaced) or "ERR errno". It first prints "ready"
// and waits for a line on stdin: the test starts it before opening the
// file, since the exec of a child closes the parent's inherited (CLOEXEC)
// descriptors, and that close is a FLUSH, which commits.
const tkoSwapStaging = `use strict; $| = 1;
my ($d, $bytes) = @ARGV; my $n = 0;
print "ready\n"; my $go = <STDIN>;
sub fail { print "ERR " . ($!+0) . "\n"; exit 0; }
opendir(my $dh, $d) or fail();
for my $e (readdir $dh) {
  next if $e eq '.' || $e eq '..' || $e eq '.evil';
  open(my $f, '>', "$d/.evil") or fail(); print $f $bytes; close($f) or fail();
  rename("$d/.evil", "$d/$e") or fail();
  $n++;
}
print "OK $n\n";`

// TestAdvInternalTakeoverStagingSwap: www-data plants its own .safefs before
// the mount. Today the daemon stages into www-data's staging/, so while
// root writes M/private/secret (root's 0600 file in root's 0700 directory)
// www-data renames its own file over root's staging file, and root's
// close() publishes the attacker's file as private/secret. Expected: the
// planted directory is quarantined at mount, the staging directory is
// root's 0700 and out of www-data's reach, and root's commit lands root's
// bytes.
func TestAdvInternalTakeoverStagingSwap(t *testing.T) {
	s := tkoNew(t, "root")
	p := s.p
	must(t, os.Mkdir(p.bpath("private"), 0o700))
	must(t, os.WriteFile(p.bpath("private", "secret"), []byte("root secret v1\n"), 0o600))
	planted := s.plant(t, "0700", nil, nil)
	if err := advMountBounded(t, p); err != nil {
		t.Fatalf("mount: %v", err)
	}

	// The attacker is started (exec done) before root opens the file.
	cmd := execCmd(t.Context(), "perl", "-e", tkoSwapStaging, p.bpath(fs.InternalDir, "staging"), "attacker's secret\n")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	testfs.AsUser(cmd, s.www)
	stdin, err := cmd.StdinPipe()
	must(t, err)
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	attacker := bufio.NewReader(stdout)
	if l, err := attacker.ReadString('\n'); l != "ready\n" {
		t.Fatalf("attacker: %q %v", l, err)
	}

	want := []byte("root secret v2: the real one\n")
	f, err := os.OpenFile(p.path("private", "secret"), os.O_WRONLY|os.O_TRUNC, 0)
	must(t, err)
	if _, err := f.Write(want); err != nil {
		f.Close()
		t.Fatal(err)
	}
	// The attack runs while root's handle holds its pending version.
	_, _ = io.WriteString(stdin, "go\n")
	res, _ := attacker.ReadString('\n')
	t.Logf("www-data's swap of the staging files: %s", strings.TrimSpace(res))
	if err := f.Close(); err != nil {
		t.Errorf("root's close: %v (its own staging file could not be touched)", err)
	}
	_ = cmd.Wait()

	b, err := os.ReadFile(p.bpath("private", "secret"))
	must(t, err)
	if !bytes.Equal(b, want) {
		t.Errorf("root's commit of private/secret published %q, want root's bytes %q (www-data swapped the staging file in the .safefs it planted)", b, want)
	}
	if st := advLstat(t, p.bpath("private", "secret")); st.Uid != 0 || st.Mode&0o777 != 0o600 {
		t.Errorf("private/secret: uid %d mode %o, want root's 0600", st.Uid, st.Mode&0o777)
	}
	tkoCheckQuarantined(t, p.Backing, planted)
	// www-data cannot reach the staging directory the daemon uses.
	r := advOp(t, &s.www, "", "write", p.bpath(fs.InternalDir, "staging", "x"), "x")
	if r.Errno != syscall.EACCES {
		t.Errorf("www-data creating a file in BACKING/.safefs/staging: errno %v, want EACCES", r.Errno)
	}
}

// tkoSwapper is www-data, run in BACKING, exchanging .safefs and .planted
// (renameat2 RENAME_EXCHANGE, one atomic step: neither name is ever
// missing) as fast as it can, until killed. Whenever neither name holds a
// directory of its own with the attack intact (the daemon quarantined it,
// or emptied its journal), it plants a new one (journal and undo file from
// its arguments) as .planted. It prints "ready" once the first is planted.
const tkoSwapper = `use strict; $| = 1;
my ($sys, $journal, $undoname, $undo) = @ARGV;
my ($a, $b) = (".safefs", ".planted");
my $n = 0;
sub put { my ($p, $c) = @_; open(my $f, '>', $p) or return; print $f $c; close($f); }
sub mine { my @s = lstat($_[0]); return @s && $s[4] == $<; }
sub intact { my $x = shift; return mine($x) && -s "$x/journal" && -e "$x/undo/$undoname"; }
sub plant {
  my $d = ".p-" . $n++;
  mkdir($d, 0700) or return;
  mkdir("$d/$_", 0700) for qw(staging undo rejected);
  put("$d/undo/$undoname", $undo);
  put("$d/journal", $journal);
  if (-e $b) { syscall($sys, -100, $d, -100, $b, 2); } else { rename($d, $b); }
}
plant(); mine($b) or die "plant failed\n";
print "ready\n";
for (my $i = 0; ; $i++) {
  syscall($sys, -100, $a, -100, $b, 2);
  plant() if $i % 64 == 0 && !intact($a) && !intact($b);
}`

// TestAdvInternalTakeoverSwapRace: the check of the internal directory must
// be made on what recovery then uses. www-data owns BACKING and keeps
// exchanging root's .safefs with its own planted one (the app.cfg attack
// inside, planted again whenever the daemon quarantines it) while root
// runs recovery, or mounts, round after round. A check by name followed by
// opens by name (the lock, the journal and staging/undo/rejected are
// opened by path today) lets the planted directory through in some round.
// Expected: conf/app.cfg is root's after every round. (A round may fail,
// or quarantine root's own directory, while the names move: that costs
// the attacker's own crash recovery, never root's file.)
func TestAdvInternalTakeoverSwapRace(t *testing.T) {
	for _, via := range []string{"recover", "mount"} {
		t.Run(via, func(t *testing.T) {
			s := tkoNew(t, "root")
			p := s.p
			undo := []byte(tkoEvilCfg)
			journal := tkoInplaceAttack(t, p.Backing, "conf/app.cfg", undo)
			cmd := exec.Command("perl", "-e", tkoSwapper, fmt.Sprint(unix.SYS_RENAMEAT2), string(journal), tkoUndoName, string(undo))
			cmd.Dir = p.Backing
			cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
			testfs.AsUser(cmd, s.www)
			var errb bytes.Buffer
			cmd.Stderr = &errb
			out, err := cmd.StdoutPipe()
			must(t, err)
			must(t, cmd.Start())
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			if l, err := bufio.NewReader(out).ReadString('\n'); l != "ready\n" {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("swapper: %q %v %s", l, err, errb.String())
			}

			rounds := 200
			if via == "mount" {
				rounds = 20
			}
			failed := 0
			for i := range rounds {
				var err error
				if via == "recover" {
					o := fs.DefaultOptions()
					o.Log = zap.NewNop()
					_, err = fs.Recover(p.Backing, o)
				} else {
					err = advMountBounded(t, p)
					p.unmount(t)
				}
				if err != nil {
					failed++
				}
				if b, err := os.ReadFile(p.bpath("conf", "app.cfg")); err != nil || string(b) != tkoRootCfg {
					t.Fatalf("round %d of %s while www-data swaps .safefs: conf/app.cfg = %q, %v: the planted directory was replayed", i, via, b, err)
				}
			}
			t.Logf("%d rounds, %d failed while the names moved; app.cfg stayed root's", rounds, failed)
		})
	}
}
