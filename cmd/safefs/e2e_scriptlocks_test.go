package main

// Script locks across daemons (cluster=etcd): two daemons of one cluster
// over one backing directory, as two hosts would be, decide flock and
// fcntl locks in etcd: the same path below both mounts is the same lock.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safefs/safefs/scriptlock/etcdtest"
)

type lockPair struct {
	etcd *etcdtest.Server
	name string // cluster_name
	mnt  [2]string
	d    [2]*mountProc
}

// startLockPair starts etcd and two daemons of one cluster on one BACKING.
func startLockPair(t *testing.T) *lockPair {
	t.Helper()
	requireFuse(t)
	requireRoot(t)
	requirePerl(t)
	lp := &lockPair{etcd: etcdtest.Start(t), name: fmt.Sprintf("t%d", time.Now().UnixNano())}
	b := tempDir(t)
	for i := range 2 {
		m := tempDir(t)
		opts := fmt.Sprintf("cluster=etcd,etcd=%s,cluster_name=%s,node=n%d,lease_ttl=3s,rmw=off,kill_check=off",
			lp.etcd.URL, lp.name, i)
		lp.d[i] = launchMount(t, exec.Command(safefsBin, "mount", "-o", opts, b, m), m)
		lp.d[i].waitMounted(t)
		lp.mnt[i] = m
		// The lock file exists on both mounts: the same path, the same lock.
		require.NoError(t, os.WriteFile(filepath.Join(m, "lk"), nil, 0o644))
	}
	return lp
}

func requirePerl(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("perl"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("perl not installed")
		}
		t.Skip("perl not installed")
	}
}

// perlLock is Perl that locks $lock with $how: flock, fcntl (F_SETLKW on
// the whole file) or their non-blocking forms flock_nb, fcntl_nb.
const perlLock = `
use strict; use Fcntl qw(:DEFAULT :flock SEEK_SET); use POSIX (); use Errno;
$| = 1;
sub lockit {
	my ($fh, $how) = @_;
	return flock($fh, LOCK_EX) if $how eq 'flock';
	return flock($fh, LOCK_EX | LOCK_NB) if $how eq 'flock_nb';
	my $fl = pack('s s x4 q q i x4', F_WRLCK, SEEK_SET, 0, 0, 0);
	return fcntl($fh, $how eq 'fcntl' ? F_SETLKW : F_SETLK, $fl);
}
`

// lockPerl starts a Perl process running perlLock then script.
func lockPerl(t *testing.T, script string, args ...string) *proc {
	t.Helper()
	return startProc(t, exec.Command("perl", append([]string{"-e", perlLock + script}, args...)...))
}

// waitOut waits until p has printed want (a whole line), or exits.
func waitOut(t *testing.T, p *proc, want string) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !strings.Contains("\n"+p.out.String(), "\n"+want+"\n") {
		select {
		case <-p.exited:
			t.Fatalf("exited (%v) without printing %q; output:\n%s", p.waitErr, want, p.out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q after %v; output:\n%s", want, waitLimit, p.out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// holder locks lk through mnt with how, prints "locked" and sleeps.
func holder(t *testing.T, how, mnt string) *proc {
	t.Helper()
	p := lockPerl(t, `open(my $l, '+<', $ARGV[1]) or die "open: $!"; lockit($l, $ARGV[0]) or die "lock: $!";
		print "locked\n"; sleep 600;`, how, filepath.Join(mnt, "lk"))
	waitOut(t, p, "locked")
	return p
}

// waiter asks for lk through mnt with how, printing "asking" before and
// "locked" once it has it.
func waiter(t *testing.T, how, mnt string) *proc {
	t.Helper()
	p := lockPerl(t, `open(my $l, '+<', $ARGV[1]) or die "open: $!"; print "asking\n";
		lockit($l, $ARGV[0]) or die "lock: $!"; print "locked\n"; sleep 600;`, how, filepath.Join(mnt, "lk"))
	waitOut(t, p, "asking")
	return p
}

// tryLock reports the errno name of a non-blocking lock of lk through
// mnt, or "ok".
func tryLock(t *testing.T, how, mnt string) string {
	t.Helper()
	p := lockPerl(t, `open(my $l, '+<', $ARGV[1]) or die "open: $!";
		if (lockit($l, $ARGV[0])) { print "ok\n" } else { print errname(), "\n" }
		sub errname { for (qw(EAGAIN EACCES ENOLCK EINTR)) { return $_ if $!{$_} } "errno " . ($!+0) }`,
		how, filepath.Join(mnt, "lk"))
	return strings.TrimSpace(p.wait(t))
}

// stillWaiting fails if w got the lock. It first waits until w's lock
// request is in its daemon (w waits for the answer: its kernel wait
// channel is request_wait_answer), so that a lock wrongly granted is not
// missed because w was slow to ask; then it gives the daemon a moment to
// answer wrongly (a wrong answer has no event to wait for; a right one
// does not depend on it).
func stillWaiting(t *testing.T, w *proc) {
	t.Helper()
	for deadline := time.Now().Add(waitLimit); !inFuseRequest(w.cmd.Process.Pid); time.Sleep(5 * time.Millisecond) {
		select {
		case <-w.exited:
			t.Fatalf("the waiter ended (%v) instead of waiting; output:\n%s", w.waitErr, w.out)
		default:
		}
		require.NotContains(t, w.out.String(), "locked", "the waiter got a lock another daemon's process holds")
		if time.Now().After(deadline) {
			t.Fatalf("the waiter's lock request never reached its daemon within %v; output:\n%s", waitLimit, w.out)
		}
	}
	time.Sleep(500 * time.Millisecond)
	require.NotContains(t, w.out.String(), "locked", "the waiter got a lock another daemon's process holds")
}

// inFuseRequest reports whether a thread of process pid waits for the
// answer to a FUSE request.
func inFuseRequest(pid int) bool {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	for _, task := range tasks {
		if w, _ := os.ReadFile(task + "/wchan"); string(w) == "request_wait_answer" {
			return true
		}
	}
	return false
}

func kill(t *testing.T, p *proc) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Kill())
	p.waitExit(t, waitLimit)
}

// Eight Perl processes, four through each daemon, each 100 times: lock
// lk through its own mount, read the counter (on mount 0 only), rewrite
// it, close (which releases the lock). The two lock files are different
// backing files, so only etcd makes the count exact.
func TestScriptLocksCounter(t *testing.T) {
	for _, how := range []string{"flock", "fcntl"} {
		t.Run(how, func(t *testing.T) {
			lp := startLockPair(t)
			data := filepath.Join(lp.mnt[0], "count")
			require.NoError(t, os.WriteFile(data, []byte("0"), 0o644))
			const procs, rounds = 8, 100
			var wg sync.WaitGroup
			for i := range procs {
				p := lockPerl(t, `my ($how, $lock, $data, $n) = @ARGV;
					for (1..$n) {
						open(my $l, '+<', $lock) or die "open lock: $!";
						lockit($l, $how) or die "lock: $!";
						open(my $r, '<', $data) or die "read: $!"; my $c = <$r>; close $r;
						open(my $w, '>', $data) or die "write: $!"; print $w $c + 1; close $w or die "close: $!";
						close $l;
					}`, how, filepath.Join(lp.mnt[i%2], "lk"), data, strconv.Itoa(rounds))
				wg.Add(1)
				go func() { defer wg.Done(); p.waitExit(t, 5*time.Minute) }()
			}
			wg.Wait()
			got, err := os.ReadFile(data)
			require.NoError(t, err)
			require.Equal(t, strconv.Itoa(procs*rounds), string(got))
		})
	}
}

// A waiter through one daemon gets the lock when the holder, through the
// other, is killed: the kernel's unlock at close (fcntl) or release
// (flock) reaches the holder's daemon.
func TestScriptLocksHolderKilled(t *testing.T) {
	for _, how := range []string{"flock", "fcntl"} {
		t.Run(how, func(t *testing.T) {
			handOver(t, how, startLockPair(t))
		})
	}
}

// handOver: a holder through mount 0 is killed while a waiter through
// mount 1 waits; the waiter gets the lock, which then excludes through
// mount 0. It returns the waiter, still holding.
func handOver(t *testing.T, how string, lp *lockPair) *proc {
	t.Helper()
	h := holder(t, how, lp.mnt[0])
	require.Equal(t, "EAGAIN", tryLock(t, how+"_nb", lp.mnt[1]))
	w := waiter(t, how, lp.mnt[1])
	stillWaiting(t, w)
	kill(t, h)
	waitOut(t, w, "locked")
	require.Equal(t, "EAGAIN", tryLock(t, how+"_nb", lp.mnt[0]), "the waiter's lock does not exclude")
	return w
}

// A wait interrupted by a signal (no SA_RESTART) ends with EINTR, and
// leaves nothing held.
func TestScriptLocksInterrupted(t *testing.T) {
	for _, how := range []string{"flock", "fcntl"} {
		t.Run(how, func(t *testing.T) {
			lp := startLockPair(t)
			h := holder(t, how, lp.mnt[0])
			waitOut(t, interrupted(t, how, lp.mnt[1]), "EINTR")
			kill(t, h)
			require.Equal(t, "ok", tryLock(t, how+"_nb", lp.mnt[0]), "an interrupted wait left a lock behind")
		})
	}
}

// interrupted waits for the lock on mnt/lk with an alarm whose handler
// has no SA_RESTART: it prints EINTR when the signal ends the wait.
func interrupted(t *testing.T, how, mnt string) *proc {
	return lockPerl(t, `open(my $l, '+<', $ARGV[1]) or die "open: $!";
		POSIX::sigaction(POSIX::SIGALRM, POSIX::SigAction->new(sub {}, POSIX::SigSet->new, 0));
		alarm 1;
		if (lockit($l, $ARGV[0])) { print "locked\n" } else { print $!+0 == POSIX::EINTR ? "EINTR\n" : "errno $!\n" }
		sleep 600;`, how, filepath.Join(mnt, "lk"))
}

// A daemon killed while its process holds a lock: the other daemon's
// waiter gets it once the dead daemon's lease ends (lease_ttl).
func TestScriptLocksDaemonKilled(t *testing.T) {
	lp := startLockPair(t)
	h := holder(t, "fcntl", lp.mnt[0])
	w := waiter(t, "fcntl", lp.mnt[1])
	stillWaiting(t, w)
	require.NoError(t, lp.d[0].cmd.Process.Kill())
	waitKilled(t, lp.d[0])
	waitOut(t, w, "locked")
	kill(t, h) // its descriptor is on the dead mount: exit does not wait for it
}

// GETLK through one daemon reports a lock held through the other: its
// type and range, pid 0 (a pid of another host means nothing here); a
// lock held through the same daemon is reported with its holder's pid.
func TestScriptLocksGetlk(t *testing.T) {
	lp := startLockPair(t)
	h := lockPerl(t, `open(my $l, '+<', $ARGV[0]) or die "open: $!";
		my $fl = pack('s s x4 q q i x4', F_WRLCK, SEEK_SET, 10, 10, 0);
		fcntl($l, F_SETLK, $fl) or die "lock: $!";
		print "locked\n"; sleep 600;`, filepath.Join(lp.mnt[0], "lk"))
	waitOut(t, h, "locked")
	getlk := func(mnt string) string {
		p := lockPerl(t, `open(my $l, '+<', $ARGV[0]) or die "open: $!";
			my $fl = pack('s s x4 q q i x4', F_WRLCK, SEEK_SET, 0, 100, 0);
			fcntl($l, F_GETLK, $fl) or die "getlk: $!";
			my ($type, $whence, $start, $len, $pid) = unpack('s s x4 q q i x4', $fl);
			print join(' ', $type == F_WRLCK ? 'W' : $type == F_UNLCK ? 'U' : $type, $start, $len, $pid), "\n";`,
			filepath.Join(mnt, "lk"))
		return strings.TrimSpace(p.wait(t))
	}
	require.Equal(t, "W 10 10 0", getlk(lp.mnt[1]))
	require.Equal(t, fmt.Sprintf("W 10 10 %d", h.cmd.Process.Pid), getlk(lp.mnt[0]))
	kill(t, h)
	require.Equal(t, "U 0 100 0", getlk(lp.mnt[1]))
}

// etcd unreachable: lock requests fail with ENOLCK (no local decision),
// reads go on (commits fail with ENOLCK too: cluster mode); etcd back:
// locks work again.
func TestScriptLocksEtcdDown(t *testing.T) {
	lp := startLockPair(t)
	data := filepath.Join(lp.mnt[1], "data")
	require.NoError(t, os.WriteFile(data, []byte("before"), 0o644))
	lp.etcd.Kill()
	for _, how := range []string{"flock_nb", "fcntl_nb", "fcntl"} {
		require.Equal(t, "ENOLCK", tryLock(t, how, lp.mnt[1]), how)
	}
	got, err := os.ReadFile(data)
	require.NoError(t, err)
	require.Equal(t, "before", string(got))
	require.ErrorIs(t, os.WriteFile(data, []byte("during"), 0o644), syscall.ENOLCK, "a commit without etcd")
	got, err = os.ReadFile(data)
	require.NoError(t, err)
	require.Equal(t, "before", string(got), "a failed commit changed the file")
	lp.etcd.Restart(t)
	h := holderWhenUp(t, lp.mnt[0])
	require.Equal(t, "EAGAIN", tryLock(t, "fcntl_nb", lp.mnt[1]))
	kill(t, h)
}

// holderWhenUp locks lk through mnt (fcntl), trying again while the
// answer is ENOLCK, prints "locked" and sleeps.
func holderWhenUp(t *testing.T, mnt string) *proc {
	t.Helper()
	p := lockPerl(t, `open(my $l, '+<', $ARGV[0]) or die "open: $!";
		until (lockit($l, 'fcntl_nb')) { die "lock: $!" unless $!{ENOLCK}; select(undef, undef, undef, 0.2) }
		print "locked\n"; sleep 600;`, filepath.Join(mnt, "lk"))
	waitOut(t, p, "locked")
	return p
}

// A daemon whose lease ends (revoked here; expired when etcd lost it for
// lease_ttl) loses the locks it carried, then takes a new lease: its
// locks exclude again.
func TestScriptLocksLeaseLost(t *testing.T) {
	lp := startLockPair(t)
	h := holder(t, "fcntl", lp.mnt[0])
	revokeHolderLease(t, lp)
	require.Equal(t, "ok", tryLock(t, "fcntl_nb", lp.mnt[1]), "a lock outlived its lease")
	kill(t, h)
	h = holderWhenUp(t, lp.mnt[0])
	require.Equal(t, "EAGAIN", tryLock(t, "fcntl_nb", lp.mnt[1]))
	kill(t, h)
}

// A file renamed while locked keeps its lock under the path it was
// locked at until its holder releases it: the unlock at close finds it.
func TestScriptLocksRename(t *testing.T) {
	lp := startLockPair(t)
	h := holder(t, "fcntl", lp.mnt[0])
	require.NoError(t, os.Rename(filepath.Join(lp.mnt[0], "lk"), filepath.Join(lp.mnt[0], "renamed")))
	// Another file at the old path: its lock key is the held one.
	require.NoError(t, os.WriteFile(filepath.Join(lp.mnt[1], "lk"), nil, 0o644))
	require.Equal(t, "EAGAIN", tryLock(t, "fcntl_nb", lp.mnt[1]))
	kill(t, h)
	require.Equal(t, "ok", tryLock(t, "fcntl_nb", lp.mnt[1]), "the lock stayed after its holder's exit")
}

// A script that wrote under a lock its daemon's lease no longer carries
// (revoked here; expired after a pause past lease_ttl) must not commit:
// another host may have taken the lock and committed meanwhile. Its
// close gets ESTALE, the other host's version stays.
func TestScriptLocksLostLockDoesNotCommit(t *testing.T) {
	for _, how := range []string{"flock", "fcntl"} {
		t.Run(how, func(t *testing.T) { lostLockDoesNotCommit(t, how) })
	}
}

// revokeHolderLease revokes the lease of the one script lock held: its
// daemon's.
func revokeHolderLease(t *testing.T, lp *lockPair) {
	t.Helper()
	cli := lp.etcd.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	held, err := cli.Get(ctx, "/safefs/"+lp.name+"/locks/", clientv3.WithPrefix())
	require.NoError(t, err)
	require.Len(t, held.Kvs, 1, "the one lock held")
	_, err = cli.Revoke(ctx, clientv3.LeaseID(held.Kvs[0].Lease))
	require.NoError(t, err)
}

func lostLockDoesNotCommit(t *testing.T, how string) {
	lp := startLockPair(t)
	goFile := filepath.Join(tempDir(t), "go")
	p := lockPerl(t, `my ($how, $lk, $data, $go) = @ARGV;
		open(my $l, '+<', $lk) or die "open: $!"; lockit($l, $how) or die "lock: $!";
		open(my $d, '>', $data) or die "open data: $!"; print $d "stale\n";
		print "locked\n";
		select(undef, undef, undef, 0.05) until -e $go;
		if (close($d)) { print "close ok\n" } else { print "close err ", $!+0, "\n" }`,
		how, filepath.Join(lp.mnt[0], "lk"), filepath.Join(lp.mnt[0], "data"), goFile)
	waitOut(t, p, "locked")
	revokeHolderLease(t, lp)
	waitLine(t, lp.d[0].proc, "etcd lease renewed")
	require.Equal(t, "ok\n", perl(t, perlLock+`my ($how, $lk, $data) = @ARGV;
		open(my $l, '+<', $lk) or die "open: $!"; lockit($l, $how) or die "lock: $!";
		open(my $d, '>', $data) or die "open data: $!"; print $d "fresh\n"; close($d) or die "close: $!";
		print "ok\n";`, how, filepath.Join(lp.mnt[1], "lk"), filepath.Join(lp.mnt[1], "data")))
	require.NoError(t, os.WriteFile(goFile, nil, 0o644))
	waitOut(t, p, fmt.Sprintf("close err %d", syscall.ESTALE))
	got, err := os.ReadFile(filepath.Join(lp.mnt[1], "data"))
	require.NoError(t, err)
	require.Equal(t, "fresh\n", string(got))
}
