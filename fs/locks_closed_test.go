package fs

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/safefs/safefs/scriptlock"
)

// A flock lock ends when its holder closes the file, so a LOCK_NB attempt
// right after gets it, as on a plain directory: through the daemon's
// locks the kernel's release comes after close() returned
// (locks_closed.go), here held 20 ms at a stop point so that every round
// meets it. While a dup of the holder's descriptor lives, the attempt is
// refused on both.
func TestFlockNonBlockingAfterClose(t *testing.T) {
	srv, _, mnt := mountForTest(t)
	released := holdAt(t, srv, "flock-release")
	for _, dir := range []string{t.TempDir(), mnt} {
		p := filepath.Join(dir, "lock")
		out, err := exec.Command("perl", "-e", flockAfterClose, p, "50", ">>", "").CombinedOutput()
		require.NoError(t, err, "%s: %s", dir, out)
		require.Equal(t, "refused 0 of 50\n", string(out), dir)
		out, err = exec.Command("perl", "-e", flockWhileDup, p).CombinedOutput()
		require.NoError(t, err, "%s: %s", dir, out)
		require.Equal(t, "refused\nreleased\n", string(out), dir)
	}
	if srv.r.opts.ScriptLocks != nil {
		require.Positive(t, released.Load(), "no flock release reached the stop point")
	}
}

// flockAfterClose locks through a descriptor opened with mode and
// closes it, then at once tries LOCK_NB on a new descriptor, n times,
// and counts the refusals; with each set, round i works on "$p.$i".
const flockAfterClose = `use Fcntl ':flock';
my ($p, $n, $mode, $each) = @ARGV;
my $refused = 0;
for my $i (1 .. $n) {
	my $f = $each ? "$p.$i" : $p;
	open(my $held, $mode, $f) or die "open: $!";
	flock($held, LOCK_EX) or die "flock: $!";
	close($held) or die "close: $!";
	open(my $try, '<', $f) or die "open: $!";
	flock($try, LOCK_EX | LOCK_NB) or $refused++;
	close($try);
}
print "refused $refused of $n\n";`

// flockWhileDup: a lock held through a dup of a closed descriptor still
// excludes, and ends with the dup's close.
const flockWhileDup = `use Fcntl ':flock';
my ($p) = @ARGV;
open(my $held, '<', $p) or die "open: $!";
flock($held, LOCK_EX) or die "flock: $!";
open(my $dup, '<&', $held) or die "dup: $!";
close($held);
open(my $try, '<', $p) or die "open: $!";
print flock($try, LOCK_EX | LOCK_NB) ? "got\n" : "refused\n";
close($dup);
for (1 .. 5000) {
	if (flock($try, LOCK_EX | LOCK_NB)) { print "released\n"; exit 0 }
	select(undef, undef, undef, 0.001);
}
print "still held\n";`

// awaitRelease: a holder that lets go within the wait hands the lock
// over; one that does not is a conflict (EAGAIN), as the attempt would
// have been at once; a table that cannot be reached stays its own error
// (ENOLCK), not a conflict.
func TestAwaitRelease(t *testing.T) {
	ctx := context.Background()
	m := scriptlock.NewMemory()
	lock := func(owner uint64, typ uint32) scriptlock.Request {
		return scriptlock.Request{Key: "f", Owner: owner, Flock: true, Range: scriptlock.Range{End: scriptlock.MaxEnd, Type: typ}}
	}
	_, err := m.Set(ctx, lock(1, scriptlock.Write), false)
	require.NoError(t, err)
	held, err := awaitRelease(ctx, m, lock(2, scriptlock.Write))
	require.ErrorIs(t, err, scriptlock.ErrConflict, "a holder that stays")
	require.False(t, held)

	go func() {
		time.Sleep(closedLockWait / 4)
		_, _ = m.Set(ctx, lock(1, scriptlock.Unlock), false)
	}()
	held, err = awaitRelease(ctx, m, lock(2, scriptlock.Write))
	require.NoError(t, err, "a holder that lets go within the wait")
	require.True(t, held)

	held, err = awaitRelease(ctx, unreachable{}, lock(3, scriptlock.Write))
	require.ErrorIs(t, err, scriptlock.ErrUnavailable)
	require.False(t, held)
}

// unreachable is a lock table that cannot be reached.
type unreachable struct{}

func (unreachable) Get(context.Context, scriptlock.Request) (scriptlock.Held, bool, error) {
	return scriptlock.Held{}, false, scriptlock.ErrUnavailable
}

func (unreachable) Set(context.Context, scriptlock.Request, bool) (bool, error) {
	return false, scriptlock.ErrUnavailable
}

// A handle is closed since its use once flushed, or if its closes are
// never sent (noFlush); a use (a read, a write) opens it again.
func TestHandleClosedSinceUse(t *testing.T) {
	h := &handle{}
	require.False(t, h.ClosedSinceUse())
	h.flushed.Store(true)
	require.True(t, h.ClosedSinceUse())
	h.flushed.Store(false)
	h.noFlush.Store(true)
	require.True(t, h.ClosedSinceUse())
}
