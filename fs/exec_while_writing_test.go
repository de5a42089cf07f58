package fs_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/testfs"
)

// TestAdvExecWhileWriting: a CGI script writes a file through the mount
// and, before closing it, runs a program (system("...")). Perl marks its
// files close-on-exec, so the child's execve closes its copy of the
// descriptor: the kernel sends FLUSH for the still-dirty handle, from the
// child, in the middle of execve. The daemon's kill-check then reads
// /proc/<child>/stat. Expected safe outcome: no hang (neither the script
// nor the daemon), the script's close succeeds and the file holds all
// its bytes.
//
// The workload runs in a subprocess (out of the test process, as a real
// web server would be), bounded by a deadline.
//
// Run with kill_check on (the default) and off, to tell the kill-check's
// read of /proc/<pid>/stat apart from the rest of the commit path.
func TestAdvExecWhileWriting(t *testing.T) {
	for _, kc := range []bool{true, false} {
		name := "kill_check_on"
		if !kc {
			name = "kill_check_off"
		}
		t.Run(name, func(t *testing.T) { advExecWhileWriting(t, kc) })
	}
}

func advExecWhileWriting(t *testing.T, killCheck bool) {
	m := testfs.New(t, func(o *fs.Options) { o.KillCheck = killCheck })
	www := testfs.LookupUser(t, "www-data")
	must(t, os.Mkdir(m.BackingPath("w"), 0o755))
	must(t, os.Chown(m.BackingPath("w"), int(www.Uid), int(www.Gid)))
	script := `
use strict; use Fcntl;
my ($path, $backing) = @ARGV;
sysopen(my $f, $path, O_WRONLY|O_CREAT|O_TRUNC, 0644) or die "open: $!\n";
defined(syswrite($f, "part1\n")) or die "write: $!\n";
system("/bin/true") == 0 or die "system: $? $!\n";
if (open(my $b, "<", $backing)) { local $/; my $c = <$b>; $c = "" unless defined $c; $c =~ s/\n/\\n/g; print "BEFORE CLOSE: backing holds \"$c\"\n"; }
defined(syswrite($f, "part2\n")) or die "write: $!\n";
close($f) or die "close: $!\n";
print "DONE\n";
`
	for i := 0; i < 3; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := testfs.AsUser(execCmd(ctx, "perl", "-e", script, m.Path("w", "out"), m.BackingPath("w", "out")), www)
		out, err, hung := advCombined(t, ctx, m.Dir, "a script that runs a program while it has a file open for writing", cmd)
		cancel()
		if hung {
			t.Fatalf("hung; script output: %s", out)
		}
		if err != nil || !strings.Contains(string(out), "DONE") {
			t.Fatalf("script: %v\n%s", err, out)
		}
		if i == 0 {
			t.Logf("%s", strings.TrimSpace(string(out)))
		}
		b, err := os.ReadFile(m.BackingPath("w", "out"))
		if err != nil || string(b) != "part1\npart2\n" {
			t.Fatalf("file holds %q (%v), want both parts", b, err)
		}
	}
}
