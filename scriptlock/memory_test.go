package scriptlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

func memReq(owner uint64, flock bool, typ uint32) Request {
	return Request{Key: "f", Owner: owner, Flock: flock, Pid: uint32(100 + owner), Range: rg(0, MaxEnd, typ)}
}

func TestMemoryExcludes(t *testing.T) {
	m := NewMemory()
	ctx := context.Background()
	mustSet(t, m, memReq(1, false, Write), true)
	if _, err := m.Set(ctx, memReq(2, false, Read), false); !errors.Is(err, ErrConflict) {
		t.Fatalf("read under another's write lock: %v, want ErrConflict", err)
	}
	h, ok, _ := m.Get(ctx, memReq(2, false, Read))
	if !ok || h.Pid != 101 || h.Type != Write {
		t.Fatalf("Get: %+v %v, want owner 1's write lock", h, ok)
	}
	// flock locks do not see fcntl locks, as on Linux.
	mustSet(t, m, memReq(2, true, Write), true)
	// An owner's own locks never conflict: it converts.
	mustSet(t, m, memReq(1, false, Read), true)
	mustSet(t, m, memReq(3, false, Read), true)
	mustSet(t, m, memReq(1, false, Unlock), false)
	mustSet(t, m, memReq(3, false, Unlock), false)
	mustSet(t, m, memReq(2, true, Unlock), false)
	if len(m.files) != 0 {
		t.Fatalf("table not empty after every unlock: %v", m.files)
	}
}

func TestMemoryWaitWokenByUnlock(t *testing.T) {
	m := NewMemory()
	mustSet(t, m, memReq(1, true, Write), true)
	got := make(chan error, 1)
	go func() {
		_, err := m.Set(context.Background(), memReq(2, true, Write), true)
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("wait ended while the lock is held: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	mustSet(t, m, memReq(1, true, Unlock), false)
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not woken by the unlock")
	}
	if _, ok, _ := m.Get(context.Background(), memReq(1, true, Write)); !ok {
		t.Fatal("the waiter does not hold the lock after its wait")
	}
}

func TestMemoryWaitInterrupted(t *testing.T) {
	m := NewMemory()
	mustSet(t, m, memReq(1, false, Write), true)
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		_, err := m.Set(ctx, memReq(2, false, Write), true)
		got <- err
	}()
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted wait: %v, want context.Canceled", err)
	}
	mustSet(t, m, memReq(1, false, Unlock), false)
	if len(m.files) != 0 {
		t.Fatal("the interrupted waiter holds something")
	}
}

func mustSet(t *testing.T, m *Memory, r Request, wantHeld bool) {
	t.Helper()
	held, err := m.Set(context.Background(), r, false)
	if err != nil || held != wantHeld {
		t.Fatalf("Set(%+v) = %v, %v; want held %v", r, held, err, wantHeld)
	}
}
