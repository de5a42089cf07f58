package etcdlock

import (
	"context"
	"errors"
	"github.com/safefs/safefs/scriptlock"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safefs/safefs/scriptlock/etcdtest"
)

// hang guards only against a hang.
const hang = 60 * time.Second

func newTable(t *testing.T, cli *clientv3.Client, node string) (*Table, clientv3.LeaseID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	l, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	return NewEtcd(cli, "/safefs/test/", l.ID, node, 3*time.Second), l.ID
}

func req(key string, owner uint64, s, e uint64, typ uint32) scriptlock.Request {
	return scriptlock.Request{Key: key, Owner: owner, Pid: uint32(owner), Range: scriptlock.Range{Start: s, End: e, Type: typ}}
}

func TestEtcdExclusion(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	a, _ := newTable(t, cli, "a")
	b, _ := newTable(t, cli, "b")
	ctx := context.Background()
	if _, err := a.Set(ctx, req("d/f", 1, 0, 9, scriptlock.Write), false); err != nil {
		t.Fatal(err)
	}
	// The same owner number on another node is another owner.
	if _, err := b.Set(ctx, req("d/f", 1, 5, 5, scriptlock.Read), false); !errors.Is(err, scriptlock.ErrConflict) {
		t.Fatalf("b read over a's write lock: %v, want ErrConflict", err)
	}
	if _, err := b.Set(ctx, req("d/f", 1, 10, 19, scriptlock.Write), false); err != nil {
		t.Fatalf("b beside a's range: %v", err)
	}
	if _, err := b.Set(ctx, req("d/g", 1, 0, 9, scriptlock.Write), false); err != nil {
		t.Fatalf("other file: %v", err)
	}
	if _, err := a.Set(ctx, req("d", 1, 0, 9, scriptlock.Write), false); err != nil {
		t.Fatalf("a path that is a prefix of the locked one: %v", err)
	}
	// An owner's own locks never conflict; a second owner of a does.
	if _, err := a.Set(ctx, req("d/f", 1, 0, 9, scriptlock.Read), false); err != nil {
		t.Fatalf("downgrade own lock: %v", err)
	}
	if _, err := a.Set(ctx, req("d/f", 2, 0, 4, scriptlock.Write), false); !errors.Is(err, scriptlock.ErrConflict) {
		t.Fatalf("second owner on a: %v, want ErrConflict", err)
	}
	// flock locks are apart from fcntl locks.
	fl := req("d/f", 3, 0, scriptlock.MaxEnd, scriptlock.Write)
	fl.Flock = true
	if _, err := b.Set(ctx, fl, false); err != nil {
		t.Fatalf("flock beside fcntl locks: %v", err)
	}
	fl.Owner = 4
	if _, err := a.Set(ctx, fl, false); !errors.Is(err, scriptlock.ErrConflict) {
		t.Fatalf("second flock: %v, want ErrConflict", err)
	}
	// GETLK: the holder's pid through this node, 0 through another.
	h, ok, err := b.Get(ctx, req("d/f", 9, 0, scriptlock.MaxEnd, scriptlock.Write))
	if err != nil || !ok || h.Pid != 0 || h.Start != 0 || h.End != 9 || h.Type != scriptlock.Read {
		t.Fatalf("b GETLK = %+v %v %v, want a's read lock 0-9 with pid 0", h, ok, err)
	}
	h, ok, err = a.Get(ctx, req("d/f", 9, 0, 9, scriptlock.Write))
	if err != nil || !ok || h.Pid != 1 {
		t.Fatalf("a GETLK = %+v %v %v, want its own owner's pid 1", h, ok, err)
	}
	if _, ok, _ := a.Get(ctx, req("d/f", 9, 0, 9, scriptlock.Read)); ok {
		t.Fatal("read GETLK conflicts with read locks")
	}
	held, err := a.Set(ctx, req("d/f", 1, 0, scriptlock.MaxEnd, scriptlock.Unlock), false)
	if err != nil || held {
		t.Fatalf("unlock: held %v, %v", held, err)
	}
	if _, err := a.Set(ctx, req("d/f", 2, 0, 9, scriptlock.Write), false); err != nil {
		t.Fatalf("after unlock: %v", err)
	}
}

func TestEtcdWait(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	a, lease := newTable(t, cli, "a")
	b, _ := newTable(t, cli, "b")
	ctx := context.Background()
	if _, err := a.Set(ctx, req("f", 1, 0, scriptlock.MaxEnd, scriptlock.Write), false); err != nil {
		t.Fatal(err)
	}
	// Interrupted wait: the ctx's error.
	ictx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(200 * time.Millisecond); cancel() }()
	if _, err := b.Set(ictx, req("f", 1, 0, 0, scriptlock.Write), true); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted wait: %v", err)
	}
	// Released by an unlock.
	got := wait(b, req("f", 1, 0, 0, scriptlock.Write))
	time.Sleep(200 * time.Millisecond)
	if _, err := a.Set(ctx, req("f", 1, 0, scriptlock.MaxEnd, scriptlock.Unlock), false); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("wait after unlock: %v", err)
	}
	// Released by the death of a's lease.
	if _, err := a.Set(ctx, req("f", 1, 5, 50, scriptlock.Write), false); err != nil {
		t.Fatal(err)
	}
	got = wait(b, req("f", 2, 10, 10, scriptlock.Write))
	if _, err := cli.Revoke(ctx, lease); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("wait after a's lease ended: %v", err)
	}
}

// wait starts a waiting Set and sends its result.
func wait(tb *Table, r scriptlock.Request) chan error {
	ch := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), hang)
		defer cancel()
		_, err := tb.Set(ctx, r, true)
		ch <- err
	}()
	return ch
}

func TestEtcdUnavailable(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	a, _ := newTable(t, cli, "a")
	a.timeout = time.Second
	if _, err := a.Set(context.Background(), req("f", 1, 0, scriptlock.MaxEnd, scriptlock.Write), false); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	if _, err := a.Set(context.Background(), req("f", 2, 0, 0, scriptlock.Write), true); !errors.Is(err, scriptlock.ErrUnavailable) {
		t.Fatalf("set with etcd gone: %v, want ErrUnavailable", err)
	}
	if _, _, err := a.Get(context.Background(), req("f", 2, 0, 0, scriptlock.Write)); !errors.Is(err, scriptlock.ErrUnavailable) {
		t.Fatalf("get with etcd gone: %v, want ErrUnavailable", err)
	}
}
