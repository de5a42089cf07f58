package fs_test

// Passthrough for writers (option passthrough=write): a write-only
// rewrite of a big file writes its staging file through the kernel. The
// writers are Perl processes driven line by line, as scripts would run.

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/testfs"
)

// ptwMount mounts safefs with passthrough=write and puts v1 in f through
// the mount (a new file: not passed through).
func ptwMount(t *testing.T, v1 []byte) (*testfs.Mount, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("passthrough needs root, and CI is set")
		}
		t.Skip("passthrough needs root (CAP_SYS_ADMIN)")
	}
	m := testfs.New(t, func(o *fs.Options) { o.VersionCache, o.Passthrough, o.PassthroughWrite = true, true, true })
	require.NoError(t, os.WriteFile(m.Path("f"), v1, 0o644))
	ptIdle(t, m)
	require.Zero(t, m.Stats().PassthroughWrite, "a new file's writer was passed through")
	return m, m.Path("f")
}

// ptwStart runs a Perl script that prints a line after each step and
// waits for a line on stdin before the next.
func ptwStart(t *testing.T, script string, args ...string) *mmProc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang only
	return startProc(t, exec.CommandContext(ctx, "perl", append([]string{"-e", script}, args...)...), cancel)
}

// expect waits for the script's next line, which must be want.
func (p *mmProc) expect(t *testing.T, want string) {
	t.Helper()
	l, err := p.out.ReadString('\n')
	require.NoError(t, err, "script ended before %q", want)
	require.Equal(t, want, strings.TrimSpace(l))
}

// next lets the script go on to its next step.
func (p *mmProc) next(t *testing.T) {
	t.Helper()
	_, err := p.stdin.Write([]byte("\n"))
	require.NoError(t, err)
}

// ptwWriter writes $ARGV[1] bytes of 'b' in 64 KiB writes to a file
// opened with `open >`, then closes it, a step at a time.
const ptwWriter = `$| = 1;
open(my $f, ">", $ARGV[0]) or die "open: $!";
my $left = $ARGV[1];
while ($left > 0) { my $n = $left < 65536 ? $left : 65536; syswrite($f, "b" x $n) == $n or die "write: $!"; $left -= $n }
print "written\n"; <STDIN>;
close($f) or die "close: $!";
print "closed\n"; <STDIN>;`

// TestPtWriteRewrite: a rewrite of a big file is passed through; while
// it is open, a reader of the name reads the committed version whole
// (its open is sent to a node of its own); the close commits the new
// version by rename, no copy.
func TestPtWriteRewrite(t *testing.T) {
	v1 := bytes.Repeat([]byte("a"), 2<<20)
	m, path := ptwMount(t, v1)
	w := ptwStart(t, ptwWriter, path, "3145728")
	w.expect(t, "written")
	require.Equal(t, int64(1), m.Stats().PassthroughWrite, "the rewrite was not passed through")
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.True(t, bytes.Equal(v1, got), "a reader saw %d bytes, not the committed version", len(got))
	w.next(t)
	w.expect(t, "closed")
	got, err = os.ReadFile(path)
	require.NoError(t, err)
	require.True(t, bytes.Equal(bytes.Repeat([]byte("b"), 3<<20), got), "after the close: %d bytes", len(got))
	require.Zero(t, m.Stats().PassthroughCopied, "a close alone on its descriptor committed a copy")
}

// TestPtWriteSmallNotPassed: a small file's rewrite goes through the
// daemon (a passthrough costs it more than it saves), and so does a
// rewrite opened for reading too.
func TestPtWriteSmallNotPassed(t *testing.T) {
	m, path := ptwMount(t, []byte("small"))
	require.NoError(t, os.WriteFile(path, []byte("again"), 0o644))
	ptIdle(t, m)
	require.NoError(t, os.WriteFile(path, bytes.Repeat([]byte("c"), 2<<20), 0o644))
	ptIdle(t, m)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_TRUNC, 0)
	require.NoError(t, err)
	_, err = f.Write([]byte("rw"))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.Zero(t, m.Stats().PassthroughWrite, "a small or read-write rewrite was passed through")
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "rw", string(got))
}

// ptwFork writes 2 MiB, forks a child that keeps the descriptor, closes
// it in the parent (a commit), then lets the child write and close.
const ptwFork = `$| = 1;
open(my $f, ">", $ARGV[0]) or die "open: $!";
syswrite($f, "b" x 2097152) == 2097152 or die "write: $!";
pipe(my $r, my $w) or die "pipe: $!";
my $pid = fork() // die "fork: $!";
if ($pid == 0) {
	close($w); <$r>;
	syswrite($f, "tail") == 4 or die "child write: $!";
	print "child wrote\n"; <STDIN>;
	close($f) or die "child close: $!";
	print "child closed\n"; <STDIN>;
	exit 0;
}
close($r);
close($f) or die "close: $!";
print "parent closed\n"; <STDIN>;
print $w "go\n"; close($w);
waitpid($pid, 0);`

// TestPtWriteForkCommitsCopy: the parent's close commits while a child
// still holds the descriptor, so what it commits is a copy: the child's
// later write does not reach the committed file before its own close.
func TestPtWriteForkCommitsCopy(t *testing.T) {
	m, path := ptwMount(t, bytes.Repeat([]byte("a"), 2<<20))
	p := ptwStart(t, ptwFork, path)
	p.expect(t, "parent closed")
	want := bytes.Repeat([]byte("b"), 2<<20)
	requireFile(t, path, want, "after the parent's close")
	require.Equal(t, int64(1), m.Stats().PassthroughCopied, "the parent's close did not commit a copy")
	p.next(t)
	p.expect(t, "child wrote")
	requireFile(t, path, want, "after the child's write, before its close")
	p.next(t)
	p.expect(t, "child closed")
	requireFile(t, path, append(bytes.Clone(want), "tail"...), "after the child's close")
}

// ptwFsync writes 2 MiB, fsyncs, writes more, closes.
const ptwFsync = `$| = 1; use IO::Handle;
open(my $f, ">", $ARGV[0]) or die "open: $!";
syswrite($f, "b" x 2097152) == 2097152 or die "write: $!";
$f->sync or die "fsync: $!";
print "synced\n"; <STDIN>;
syswrite($f, "tail") == 4 or die "write: $!";
print "wrote\n"; <STDIN>;
close($f) or die "close: $!";
print "closed\n"; <STDIN>;`

// TestPtWriteFsyncCommitsCopy: fsync commits (a copy: the descriptor
// goes on writing), and a write after it stays pending until the close.
func TestPtWriteFsyncCommitsCopy(t *testing.T) {
	m, path := ptwMount(t, bytes.Repeat([]byte("a"), 2<<20))
	p := ptwStart(t, ptwFsync, path)
	p.expect(t, "synced")
	want := bytes.Repeat([]byte("b"), 2<<20)
	requireFile(t, path, want, "after fsync")
	p.next(t)
	p.expect(t, "wrote")
	requireFile(t, path, want, "after a write that followed fsync")
	p.next(t)
	p.expect(t, "closed")
	requireFile(t, path, append(bytes.Clone(want), "tail"...), "after the close")
	require.Equal(t, int64(1), m.Stats().PassthroughCopied, "%+v", m.Stats())
}

// TestPtWriteKilledNotCommitted: a passed-through writer killed by
// SIGKILL commits nothing, though the daemon never saw its writes.
func TestPtWriteKilledNotCommitted(t *testing.T) {
	v1 := bytes.Repeat([]byte("a"), 2<<20)
	m, path := ptwMount(t, v1)
	w := ptwStart(t, ptwWriter, path, "3145728")
	w.expect(t, "written")
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGKILL))
	_ = w.cmd.Wait()
	ptIdle(t, m)
	requireFile(t, path, v1, "after the writer was killed")
	require.Equal(t, int64(1), m.Stats().Killed, "%+v", m.Stats())
}

// requireFile reads path through the mount and compares it with want.
func requireFile(t *testing.T, path string, want []byte, when string) {
	t.Helper()
	got, err := os.ReadFile(path)
	require.NoError(t, err, when)
	require.True(t, bytes.Equal(want, got), "%s: %d bytes, want %d", when, len(got), len(want))
}

// ptwRewriter rewrites $ARGV[0] $ARGV[2] times with $ARGV[1] bytes of
// one letter, its own.
const ptwRewriter = `my ($p, $size, $n, $c) = @ARGV;
for (1 .. $n) {
	open(my $f, ">", $p) or die "open: $!";
	my $left = $size;
	while ($left > 0) { my $k = $left < 65536 ? $left : 65536; syswrite($f, $c x $k) == $k or die "write: $!"; $left -= $k }
	close($f) or die "close: $!";
}`

// ptwChecker reads $ARGV[0] whole $ARGV[2] times and dies unless each
// read is $ARGV[1] bytes of one letter.
const ptwChecker = `my ($p, $size, $n) = @ARGV;
for (1 .. $n) {
	open(my $f, "<", $p) or die "open: $!";
	local $/; my $d = <$f>; close($f);
	length($d) == $size or die "read " . length($d) . " bytes";
	my $c = substr($d, 0, 1);
	$d =~ /^\Q$c\E+$/ or die "mixed versions";
}`

// TestPtWriteConcurrent: writers rewriting one big file at once (one
// passed through at a time, the others on nodes of their own) and
// readers reading it: every read is one writer's version, whole.
func TestPtWriteConcurrent(t *testing.T) {
	const size = 2 << 20
	m, path := ptwMount(t, bytes.Repeat([]byte("a"), size))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang only
	defer cancel()
	var cmds []*exec.Cmd
	for i, c := range []string{"b", "c", "d"} {
		cmds = append(cmds, exec.CommandContext(ctx, "perl", "-e", ptwRewriter, path, "2097152", "15", c))
		cmds = append(cmds, exec.CommandContext(ctx, "perl", "-e", ptwChecker, path, "2097152", strconv.Itoa(40+i)))
	}
	outs := make([]bytes.Buffer, len(cmds))
	for i, c := range cmds {
		c.Stdout, c.Stderr = &outs[i], &outs[i]
		require.NoError(t, c.Start())
	}
	for i, c := range cmds {
		require.NoError(t, c.Wait(), "%v: %s", c.Args[3:], outs[i].String())
	}
	require.Positive(t, m.Stats().PassthroughWrite, "no writer was passed through")
}
