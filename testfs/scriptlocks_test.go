package testfs

import (
	"context"
	"errors"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/posixtest"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/scriptlock/etcdlock"
	"github.com/safefs/safefs/scriptlock/etcdtest"
)

// lockMounts mounts two safefs in this process whose script locks are
// in one etcd, as two hosts' daemons (node a and b), for the race
// detector's look at the daemon's lock code.
func lockMounts(t *testing.T) [2]*Mount {
	t.Helper()
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	var ms [2]*Mount
	for i, node := range []string{"a", "b"} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		l, err := cli.Grant(ctx, 30)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.KeepAlive(t.Context(), l.ID); err != nil {
			t.Fatal(err)
		}
		table := etcdlock.NewEtcd(cli, "/safefs/testfs/", l.ID, node, 3*time.Second)
		ms[i] = New(t, func(o *fs.Options) { o.ScriptLocks = table; o.RMWAuto = false; o.RMWGlobs = nil })
		if err := os.WriteFile(ms[i].Path("lk"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return ms
}

// Goroutines flock lk through either mount and increment a counter on
// mount 0: exact only if the two mounts' flocks exclude each other.
func TestScriptLocksFlockCounterInProcess(t *testing.T) {
	ms := lockMounts(t)
	count := ms[0].Path("count")
	if err := os.WriteFile(count, []byte("0"), 0o644); err != nil {
		t.Fatal(err)
	}
	const workers, rounds = 6, 40
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				if err := increment(ms[i%2].Path("lk"), count); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got, err := os.ReadFile(count)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != strconv.Itoa(workers*rounds) {
		t.Fatalf("count %s, want %d", got, workers*rounds)
	}
}

func increment(lock, count string) error {
	l, err := os.OpenFile(lock, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer l.Close()
	if err := unix.Flock(int(l.Fd()), unix.LOCK_EX); err != nil {
		return err
	}
	b, err := os.ReadFile(count)
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(string(b))
	if err != nil {
		return err
	}
	return os.WriteFile(count, []byte(strconv.Itoa(n+1)), 0o644)
}

// go-fuse's own lock test (a write lock seen by F_OFD_GETLK through
// another descriptor), and an OFD lock through one mount excluding one
// through the other.
func TestScriptLocksPosixtestInProcess(t *testing.T) {
	ms := lockMounts(t)
	posixtest.FcntlFlockSetLk(t, ms[0].Dir)
	f0, err := os.OpenFile(ms[0].Path("lk"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f0.Close()
	f1, err := os.OpenFile(ms[1].Path("lk"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f1.Close()
	wr := unix.Flock_t{Type: unix.F_WRLCK}
	if err := unix.FcntlFlock(f0.Fd(), unix.F_OFD_SETLK, &wr); err != nil {
		t.Fatalf("OFD lock: %v", err)
	}
	rd := unix.Flock_t{Type: unix.F_RDLCK}
	if err := unix.FcntlFlock(f1.Fd(), unix.F_OFD_SETLK, &rd); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("OFD read lock through the other mount: %v, want EAGAIN", err)
	}
	if err := f0.Close(); err != nil {
		t.Fatal(err)
	}
	// The release that ends the OFD lock comes after close() returns.
	deadline := time.Now().Add(time.Minute)
	for {
		err := unix.FcntlFlock(f1.Fd(), unix.F_OFD_SETLK, &rd)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EAGAIN) || time.Now().After(deadline) {
			t.Fatalf("OFD read lock after the holder's close: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
