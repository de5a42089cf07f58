package fs_test

// Directory descriptors (security round 3, item 7). Each directory the
// daemon works in needs an O_PATH descriptor of it; one held from the
// first use until the kernel forgets the directory let www-data, holding
// 20,000 directories open through the mount, take every descriptor the
// daemon had: root then got EMFILE on cat, ls and append, ESTALE on
// create, and its commits went to rejected/, logged as if the directory
// had left BACKING.

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
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

// dfdHoldPerl opens and reads each directory ARGV[0]/dNNNN (ARGV[1] of
// them) and keeps it open, prints "held K failed F errno E" (E: the
// first failure's), and holds them until its stdin closes.
const dfdHoldPerl = `
use strict;
my ($base, $n) = @ARGV; my @h; my ($ok, $bad, $first) = (0, 0, 0);
for my $i (0 .. $n - 1) {
  my $d;
  if (opendir($d, sprintf("%s/d%05d", $base, $i)) && (my @e = readdir($d))) { push @h, $d; $ok++; }
  else { $first ||= $!+0; $bad++; }
}
$| = 1;
print "held $ok failed $bad errno $first\n";
my $line = <STDIN>;
`

// dfdNofile is the descriptor limit of the daemon (this process) for the
// test: the daemon keeps 1024 of it for root's callers, directories and
// the journal (internal/limits, fdReserve), so a user holding dfdDirs
// directories open exhausts it if each held a descriptor in the daemon.
const (
	dfdNofile = 1536
	dfdDirs   = 2000
)

// TestAdvDirFdsBounded: www-data holds 2000 directories open through the
// mount, each read once, with the daemon's descriptor limit at 1536.
// Meanwhile root's cat, ls, append, create and rewrites (commits) all
// work, no commit is rejected, the daemon holds a bounded number of
// descriptors of those directories, and no log line says a directory left
// BACKING.
func TestAdvDirFdsBounded(t *testing.T) {
	www := testfs.LookupUser(t, "www-data")
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		vacSkip(t, "no prlimit (Debian package util-linux): %v", err)
	}
	p := advNewDirs(t)
	many := p.bpath("many")
	must(t, os.Mkdir(many, 0o755))
	for i := range dfdDirs {
		d := filepath.Join(many, fmt.Sprintf("d%05d", i))
		must(t, os.Mkdir(d, 0o755))
		must(t, os.Chown(d, int(www.Uid), int(www.Gid)))
	}
	must(t, os.Chown(many, int(www.Uid), int(www.Gid)))
	must(t, os.Mkdir(p.bpath("sub"), 0o755))
	must(t, os.WriteFile(p.bpath("page"), []byte("root's page\n"), 0o644))
	must(t, os.WriteFile(p.bpath("log"), []byte("line 1\n"), 0o644))
	must(t, os.WriteFile(p.bpath("sub", "conf"), []byte("old conf\n"), 0o644))

	// The in-process daemon shares this process's limit: lowered before
	// the mount (which sizes its caps from it), restored after the
	// unmount (cleanups run last registered first).
	var lim unix.Rlimit
	must(t, unix.Getrlimit(unix.RLIMIT_NOFILE, &lim))
	if lim.Cur < dfdNofile {
		t.Skipf("descriptor limit %d is below the test's %d", lim.Cur, dfdNofile)
	}
	must(t, unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: dfdNofile, Max: lim.Max}))
	t.Cleanup(func() {
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
			t.Errorf("restore the descriptor limit: %v", err)
		}
	})
	core, obs := observer.New(zapcore.WarnLevel)
	must(t, p.mount(t, func(o *fs.Options) {
		o.Log = zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), core))
	}))

	// Root's requests come from a process of its own, started before
	// the directories are held (this process is the daemon: out of
	// descriptors, it could start none).
	root := exec.Command("perl", "-e", dfdRootPerl, p.Dir)
	root.Dir = "/"
	root.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	rootIn, err := root.StdinPipe()
	must(t, err)
	rootOut, err := root.StdoutPipe()
	must(t, err)
	var rootErr syncBuffer // read while it runs
	root.Stderr = &rootErr
	must(t, root.Start())
	t.Cleanup(func() {
		rootIn.Close()
		_ = root.Process.Kill()
		_ = root.Wait()
	})

	// www-data's holder, with a limit of its own high enough for them all.
	cmd := exec.Command(prlimit, "--nofile=8192:8192", "--", "perl", "-e", dfdHoldPerl, p.path("many"), fmt.Sprint(dfdDirs))
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	testfs.AsUser(cmd, www)
	stdin, err := cmd.StdinPipe()
	must(t, err)
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	var errb syncBuffer
	cmd.Stderr = &errb
	must(t, cmd.Start())
	var endOnce sync.Once
	endHolder := func() {
		endOnce.Do(func() {
			stdin.Close()
			_ = cmd.Wait()
		})
	}
	t.Cleanup(endHolder)
	guard := time.AfterFunc(5*time.Minute, func() { // a guard against a hang only
		_ = cmd.Process.Kill()
		_ = root.Process.Kill()
	})
	defer guard.Stop()
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	t.Logf("www-data: %s", strings.TrimSpace(line))
	var held, failed, errno int
	if _, err := fmt.Sscanf(line, "held %d failed %d errno %d", &held, &failed, &errno); err != nil {
		t.Fatalf("the holder said %q: %v %s", line, err, errb.String())
	}
	if failed > 0 {
		t.Errorf("www-data could open and read only %d of %d directories (first failure: %v)", held, dfdDirs, syscall.Errno(errno))
	}

	// Root's requests while they are held.
	_, err = io.WriteString(rootIn, "go\n")
	must(t, err)
	sc := bufio.NewScanner(rootOut)
	for sc.Scan() && sc.Text() != "done" {
		what, res, _ := strings.Cut(sc.Text(), " ")
		t.Logf("root's %s: %s", what, res)
		if res != "OK" {
			t.Errorf("root's %s while www-data holds %d directories open: %s", what, held, res)
		}
	}
	if rootErr.String() != "" {
		t.Errorf("root's requests: %s", rootErr.String())
	}
	if n := p.srv.Stats().Rejected; n != 0 {
		t.Errorf("%d commits rejected", n)
	}

	// The daemon's descriptors of the held directories stay bounded.
	dirFds := 0
	if ents, err := os.ReadDir("/proc/self/fd"); err != nil {
		t.Errorf("list the daemon's descriptors: %v", err)
	} else {
		for _, e := range ents {
			if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, many+"/") {
				dirFds++
			}
		}
	}
	t.Logf("the daemon holds %d descriptors of directories in many/ (%d held open by www-data)", dirFds, held)
	if dirFds > dfdDirs/4 {
		t.Errorf("the daemon holds %d descriptors of the %d directories www-data holds open: not bounded", dirFds, held)
	}
	for _, e := range obs.All() {
		if strings.Contains(e.Message, "no longer inside") {
			t.Errorf("logged %q %v: no directory left BACKING", e.Message, e.ContextMap())
		}
	}

	endHolder()
	for _, c := range []struct{ path, want string }{
		{"log", "line 1\nline 2\n"}, {"sub/new", "new file\n"}, {"sub/conf", "new conf\n"},
		{"many/d01999/root", "in a held directory\n"},
	} {
		if b, err := os.ReadFile(p.bpath(c.path)); err != nil || string(b) != c.want {
			t.Errorf("BACKING/%s holds %q (%v), want %q", c.path, b, err, c.want)
		}
	}
	if n, _ := advStagingUsage(t, p.Backing, "rejected"); n != 0 {
		t.Errorf("%d entries in rejected/", n)
	}
}

// dfdRootPerl waits for a line on stdin, then makes root's requests
// through the mount ARGV[0], printing "what OK" or "what ERR errno" (or
// "what WRONG" for unexpected contents) for each, then "done".
const dfdRootPerl = `
use strict;
my ($mnt) = @ARGV;
$| = 1;
my $go = <STDIN>;
sub res { my ($what, $ok, $wrong) = @_; print "$what ", ($ok ? "OK" : $wrong ? "WRONG" : "ERR " . ($!+0)), "\n"; }
my ($f, $d, $b, @e);
$b = undef; $! = 0;
res("cat", open($f, '<', "$mnt/page") && defined($b = do { local $/; <$f> }) && $b eq "root's page\n", defined $b);
res("ls", opendir($d, $mnt) && (@e = readdir($d)) > 2);
@e = ();
res("ls-many", opendir($d, "$mnt/many") && (@e = readdir($d)) == ` + "2002" + `, @e > 0);
res("append", open($f, '>>', "$mnt/log") && print($f "line 2\n") && close($f));
res("create", open($f, '>', "$mnt/sub/new") && print($f "new file\n") && close($f));
res("rewrite", open($f, '>', "$mnt/sub/conf") && print($f "new conf\n") && close($f));
res("create-in-a-held-directory", open($f, '>', "$mnt/many/d01999/root") && print($f "in a held directory\n") && close($f));
print "done\n";
`
