package testfs

// Behaviour cases: flock and fcntl locks between processes.

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func caseFlock(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "x")
	a := bhOpen(t, p, os.O_RDWR, 0)
	b := bhOpen(t, p, os.O_RDONLY, 0)
	require.NoError(t, unix.Flock(int(a.Fd()), unix.LOCK_EX|unix.LOCK_NB))
	require.ErrorIs(t, unix.Flock(int(b.Fd()), unix.LOCK_EX|unix.LOCK_NB), unix.EWOULDBLOCK)
	require.ErrorIs(t, unix.Flock(int(b.Fd()), unix.LOCK_SH|unix.LOCK_NB), unix.EWOULDBLOCK)
	// Still held after a's writes are committed by fsync.
	_, err := a.WriteAt([]byte("y"), 0)
	require.NoError(t, err)
	require.NoError(t, a.Sync())
	require.ErrorIs(t, unix.Flock(int(b.Fd()), unix.LOCK_EX|unix.LOCK_NB), unix.EWOULDBLOCK)
	// A third fd, opened after the commit, is excluded too.
	c := bhOpen(t, p, os.O_RDONLY, 0)
	require.ErrorIs(t, unix.Flock(int(c.Fd()), unix.LOCK_EX|unix.LOCK_NB), unix.EWOULDBLOCK)
	require.NoError(t, unix.Flock(int(a.Fd()), unix.LOCK_UN))
	require.NoError(t, unix.Flock(int(b.Fd()), unix.LOCK_SH|unix.LOCK_NB))
	require.NoError(t, unix.Flock(int(c.Fd()), unix.LOCK_SH|unix.LOCK_NB))
	require.ErrorIs(t, unix.Flock(int(a.Fd()), unix.LOCK_EX|unix.LOCK_NB), unix.EWOULDBLOCK)
	// Closing releases: at once on a local file system; through the
	// daemon's locks (the default) when the kernel's RELEASE, sent after
	// close() returned, reaches it (docs/design.md, locks).
	bhClose(t, b)
	bhClose(t, c)
	var err2 error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if err2 = unix.Flock(int(a.Fd()), unix.LOCK_EX|unix.LOCK_NB); err2 != unix.EWOULDBLOCK {
			break
		}
	}
	require.NoError(t, err2, "the closed files' locks were not released")
}

// bhHold runs a Perl program in another process, which holds something
// (a lock, an open writer) until its stdin closes at the test's end. It
// returns the first line the program prints when ready, its pid, and a
// function that ends it early.
func bhHold(t *testing.T, prog string, args ...string) (string, int, func()) {
	t.Helper()
	cmd := exec.Command("perl", append([]string{"-e", prog}, args...)...)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	var once sync.Once
	stop := func() {
		once.Do(func() {
			stdin.Close()
			require.NoError(t, cmd.Wait(), "perl: %s", stderr.String())
		})
	}
	t.Cleanup(stop)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		stdin.Close()
		werr := cmd.Wait()
		t.Fatalf("perl said nothing: %v %v: %s", err, werr, stderr.String())
	}
	return line, cmd.Process.Pid, stop
}

// perlLock holds a whole-file write lock (struct flock on x86_64/arm64:
// short type, short whence, pad, off_t start, off_t len, pid_t pid, pad)
// until its stdin closes.
const perlLock = `use Fcntl;
open(my $fh, "+<", $ARGV[0]) or die "open: $!";
my $lk = pack("s s x4 q q i x4", F_WRLCK, 0, 0, 0, 0);
fcntl($fh, F_SETLK, $lk) or die "fcntl: $!";
$| = 1; print "locked\n";
<STDIN>;`

func caseFcntlLockTwoProcesses(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "x")
	line, pid, stop := bhHold(t, perlLock, p)
	require.Equal(t, "locked\n", line)

	f := bhOpen(t, p, os.O_RDWR, 0)
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0}
	err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk)
	require.Error(t, err)
	require.True(t, errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES), "got %v", err)
	lk = unix.Flock_t{Type: unix.F_RDLCK}
	require.NoError(t, unix.FcntlFlock(f.Fd(), unix.F_GETLK, &lk))
	require.Equal(t, int16(unix.F_WRLCK), lk.Type)
	require.Equal(t, int32(pid), lk.Pid)
	stop()
	lk = unix.Flock_t{Type: unix.F_WRLCK}
	require.NoError(t, unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk))
}
