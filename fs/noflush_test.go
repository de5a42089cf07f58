package fs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A reader's close() sends no FLUSH while no script lock was ever asked
// for on the file; once one was, its readers' closes are sent again (the
// FLUSH drops the closing process's fcntl locks).
func TestReaderNoFlush(t *testing.T) {
	_, backing, mnt, logs := mountTraced(t, func(o *Options) { o.VersionCache = true })
	for _, nm := range []string{"plain", "locked"} {
		require.NoError(t, os.WriteFile(filepath.Join(backing, nm), []byte(nm+"\n"), 0o644))
	}
	flushes := func() int { return logs.FilterMessageSnippet("FLUSH").FilterMessageSnippet("rx ").Len() }
	read := func(nm string) int {
		before := flushes()
		b, err := os.ReadFile(filepath.Join(mnt, nm))
		require.NoError(t, err)
		require.Equal(t, nm+"\n", string(b))
		return flushes() - before
	}

	require.Zero(t, read("plain"), "a reader of a file never locked")
	require.Zero(t, read("plain"), "again")

	f, err := os.Open(filepath.Join(mnt, "locked"))
	require.NoError(t, err)
	require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_SH))
	require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_UN))
	require.NoError(t, f.Close())
	require.Equal(t, 1, read("locked"), "a reader of a file locked once")
}

// Locks taken through a reader whose close the daemon is not told of end
// as they do through any other descriptor: an fcntl lock at its release,
// a flock lock is there for a LOCK_NB attempt right after the close (it
// waits for the release, held back here 20 ms at a stop point before the
// daemon looks at it).
func TestReaderNoFlushLocks(t *testing.T) {
	srv, backing, mnt := mountForTest(t, func(o *Options) { o.VersionCache = true })
	const n = 20
	for i := range n + 1 {
		require.NoError(t, os.WriteFile(filepath.Join(backing, fmt.Sprintf("f.%d", i)), []byte("data\n"), 0o644))
	}
	released := holdAt(t, srv, "flock-released")

	out, err := exec.Command("perl", "-e", fcntlReaderClosed, filepath.Join(mnt, "f.0")).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, "busy got\n", string(out))

	// n times, on a file never locked before, a reader takes LOCK_EX.
	out, err = exec.Command("perl", "-e", flockAfterClose, filepath.Join(mnt, "f"), fmt.Sprint(n), "<", "each").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, fmt.Sprintf("refused 0 of %d\n", n), string(out))
	require.Positive(t, released.Load(), "no flock release reached the stop point")
}

// fcntlReaderClosed: a read lock through a reader excludes a writer's
// lock of another process until the reader is closed; then a waiting
// lock is granted (within 10 s).
const fcntlReaderClosed = `use Fcntl;
my ($p) = @ARGV;
# struct flock on x86_64 linux: short type, short whence, (pad), off_t
# start, off_t len, pid_t pid, (pad).
sub lk { pack("s s x4 q q i x4", $_[0], SEEK_SET, 0, 0, 0) }
sub try {
	my ($cmd) = @_;
	my $pid = fork();
	if ($pid == 0) {
		open(my $w, '+<', $p) or die "open: $!";
		alarm 10;
		exit(fcntl($w, $cmd, lk(F_WRLCK)) ? 0 : 1);
	}
	waitpid($pid, 0);
	return $? == 0 ? "got" : "busy";
}
open(my $r, '<', $p) or die "open: $!";
fcntl($r, F_SETLK, lk(F_RDLCK)) or die "lock: $!";
my $held = try(F_SETLK);
close($r) or die "close: $!";
print "$held ", try(F_SETLKW), "\n";`
