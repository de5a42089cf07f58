package rmw

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const long = time.Minute // a wait that must not be what ends the test

func enter(t *testing.T, tb *Table, key uint64, pid int32, wait time.Duration) (*Session, Outcome) {
	t.Helper()
	s, out, _ := tb.Enter(context.Background(), key, pid, nil, wait)
	return s, out
}

func TestTakeJoinEnd(t *testing.T) {
	tb := New(long)
	s, out := enter(t, tb, 1, 10, long)
	if out != Took || s.Holder != 10 {
		t.Fatalf("first enter: %v holder %d", out, s.Holder)
	}
	s2, out := enter(t, tb, 1, 10, long)
	if out != Joined || s2 != s {
		t.Fatalf("same process: %v", out)
	}
	s.End()
	if tb.Held(1) != nil || !s.Ended() {
		t.Fatal("session still held after End")
	}
	if _, out := enter(t, tb, 1, 11, long); out != Took {
		t.Fatalf("after end: %v", out)
	}
}

// A session keeps the lease of its cluster lock; a joined open finds it.
func TestSessionLease(t *testing.T) {
	tb := New(long)
	s, _ := enter(t, tb, 1, 10, long)
	if s.Lease() != 0 {
		t.Fatalf("lease %d before SetLease", s.Lease())
	}
	s.SetLease(7)
	if s2, out := enter(t, tb, 1, 10, long); out != Joined || s2.Lease() != 7 {
		t.Fatalf("joined: %v, lease %d", out, s2.Lease())
	}
}

func TestFamilyJoins(t *testing.T) {
	tb := New(long)
	s, _ := enter(t, tb, 1, 10, long)
	fam := func(holder, pid int32) bool { return holder == 10 && pid == 20 }
	s2, out, _ := tb.Enter(context.Background(), 1, 20, fam, long)
	if out != Joined || s2 != s {
		t.Fatalf("child of holder: %v", out)
	}
}

// TestWaitFIFO: waiters get the session in arrival order, each when the
// previous one ends it.
func TestWaitFIFO(t *testing.T) {
	tb := New(long)
	s, _ := enter(t, tb, 1, 1, long)
	var mu sync.Mutex
	var order []int32
	var wg sync.WaitGroup
	for pid := int32(2); pid <= 5; pid++ {
		wg.Go(func() {
			s, out := enter(t, tb, 1, pid, long)
			if out != Granted {
				t.Errorf("pid %d: %v", pid, out)
				return
			}
			mu.Lock()
			order = append(order, pid)
			mu.Unlock()
			s.End()
		})
		for tb.Waiting(1) != int(pid-1) {
			time.Sleep(time.Millisecond)
		}
	}
	s.End()
	wg.Wait()
	if len(order) != 4 || order[0] != 2 || order[1] != 3 || order[2] != 4 || order[3] != 5 {
		t.Fatalf("order %v, want [2 3 4 5]", order)
	}
	if tb.Len() != 0 {
		t.Fatalf("%d sessions left", tb.Len())
	}
}

// TestCycleBroken: A holds X and waits for Y; B holds Y and asks for X:
// B gets Cycle at once, naming A.
func TestCycleBroken(t *testing.T) {
	tb := New(long)
	const a, b, x, y = 1, 2, 100, 200
	enter(t, tb, x, a, long)
	sy, _ := enter(t, tb, y, b, long)
	done := make(chan Outcome)
	go func() { _, out := enter(t, tb, y, a, long); done <- out }()
	for tb.Waiting(y) != 1 {
		time.Sleep(time.Millisecond)
	}
	s, out, holder := tb.Enter(context.Background(), x, b, nil, long)
	if out != Cycle || s != nil || holder != a {
		t.Fatalf("closing the cycle: %v holder %d", out, holder)
	}
	if _, out, _ := tb.Enter(context.Background(), x, b, nil, long); out != Passed {
		t.Fatalf("B's next open of X: %v, want Passed", out)
	}
	sy.End()
	if out := <-done; out != Granted {
		t.Fatalf("A after B ended Y: %v", out)
	}
}

// TestLongCycle: A waits for B, B waits for C, C asks for A's file.
func TestLongCycle(t *testing.T) {
	tb := New(long)
	enter(t, tb, 1, 10, long)
	enter(t, tb, 2, 20, long)
	enter(t, tb, 3, 30, long)
	go enter(t, tb, 2, 10, long) // 10 waits for 20
	for tb.Waiting(2) != 1 {
		time.Sleep(time.Millisecond)
	}
	go enter(t, tb, 3, 20, long) // 20 waits for 30
	for tb.Waiting(3) != 1 {
		time.Sleep(time.Millisecond)
	}
	if _, out := enter(t, tb, 1, 30, long); out != Cycle {
		t.Fatalf("30 asking for 10's file: %v, want Cycle", out)
	}
}

func TestGiveUp(t *testing.T) {
	tb := New(long)
	enter(t, tb, 1, 10, long)
	s, out, holder := tb.Enter(context.Background(), 1, 11, nil, 20*time.Millisecond)
	if out != GaveUp || s != nil || holder != 10 {
		t.Fatalf("%v holder %d", out, holder)
	}
	if tb.Waiting(1) != 0 {
		t.Fatal("gave up but still queued")
	}
	if _, out, _ := tb.Enter(context.Background(), 1, 11, nil, long); out != Passed {
		t.Fatalf("second open after giving up: %v, want Passed", out)
	}
}

func TestStopped(t *testing.T) {
	tb := New(long)
	enter(t, tb, 1, 10, long)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, out, _ := tb.Enter(ctx, 1, 11, nil, long); out != Stopped {
		t.Fatalf("%v, want Stopped", out)
	}
}

// TestHoldAfterLastClose: the session ends hold after its last close,
// not before, and a join in between keeps it.
func TestHoldAfterLastClose(t *testing.T) {
	tb := New(50 * time.Millisecond)
	s, _ := enter(t, tb, 1, 10, long)
	s2, _ := enter(t, tb, 1, 10, long)
	s.Close()
	time.Sleep(100 * time.Millisecond)
	if s.Ended() {
		t.Fatal("ended while a handle was still open")
	}
	s2.Close()
	waited := make(chan Outcome)
	go func() { _, out := enter(t, tb, 1, 11, long); waited <- out }()
	select {
	case out := <-waited:
		if out != Granted && out != Took {
			t.Fatalf("waiter: %v", out)
		}
	case <-time.After(long):
		t.Fatal("hold never ended")
	}
	if !s.Ended() {
		t.Fatal("session not ended")
	}
}

func TestLearnedRoundTrip(t *testing.T) {
	l := NewLearned()
	l.Add(Pair{33, "data/count.txt", "/usr/bin/perl /cgi/count.pl"})
	l.Add(Pair{0, "a\nb \"q\"", "x y"})
	if l.Add(Pair{33, "data/count.txt", "/usr/bin/perl /cgi/count.pl"}) {
		t.Fatal("duplicate added")
	}
	got, err := Decode(strings.NewReader(string(l.Encode())))
	if err != nil {
		t.Fatal(err)
	}
	if !got.Has(Pair{0, "a\nb \"q\"", "x y"}) || !got.HasPath(33, "data/count.txt") || got.Len() != 2 {
		t.Fatalf("decoded %v", got.List())
	}
	if got.HasPath(0, "data/count.txt") || got.Has(Pair{0, "data/count.txt", "/usr/bin/perl /cgi/count.pl"}) {
		t.Fatal("www-data's pair selects root's processes")
	}
}

func TestLearnedBad(t *testing.T) {
	for _, bad := range []string{"x y\n", "\"a\"\n", "0 \"/abs\" \"c\"\n", "0 \"a\" \"c\" junk\n",
		"\"a\" \"c\"\n", "-1 \"a\" \"c\"\n", "4294967296 \"a\" \"c\"\n"} {
		if _, err := Decode(strings.NewReader(bad)); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
}

// TestLearnedBounded: one user fills its own share only, never the
// set; root's pairs do not count against the others'; a stored file
// holding more is cut to the same bounds when read.
func TestLearnedBounded(t *testing.T) {
	l := NewLearned()
	for i := range 10 * MaxPerUID {
		l.Add(Pair{33, strings.Repeat("p", i+1), "c"})
	}
	if l.Len() != MaxPerUID || !l.Full(33) || l.Full(65534) || l.Full(0) {
		t.Fatalf("one user's flood: %d pairs kept, full for it %v, for others %v %v", l.Len(), l.Full(33), l.Full(65534), l.Full(0))
	}
	if !l.Add(Pair{65534, "other/count.txt", "c"}) {
		t.Fatal("another user's pair refused after one user's flood")
	}
	// Many users together fill the set; root still learns its share.
	for uid := uint32(1000); !l.Full(uid); uid++ {
		for i := 0; !l.Full(uid); i++ {
			l.Add(Pair{uid, strconv.Itoa(i), "c"})
		}
	}
	if l.Len() != MaxLearned || !l.Full(1) {
		t.Fatalf("%d pairs of users other than root, want %d", l.Len(), MaxLearned)
	}
	for i := range MaxPerUID + 5 {
		l.Add(Pair{0, strconv.Itoa(i), "c"})
	}
	if l.Len() != MaxLearned+MaxPerUID || !l.Full(0) {
		t.Fatalf("%d pairs with root's, want %d", l.Len(), MaxLearned+MaxPerUID)
	}
	if len(l.Encode()) > MaxBytes {
		t.Fatalf("a full set encodes to %d bytes, over MaxBytes %d", len(l.Encode()), MaxBytes)
	}

	// A stored file (hand-written, or from a version without bounds)
	// with a flood by one user before another user's pair.
	var b strings.Builder
	for i := range 10 * MaxPerUID {
		fmt.Fprintf(&b, "33 %q \"c\"\n", strconv.Itoa(i))
	}
	b.WriteString("65534 \"other/count.txt\" \"c\"\n")
	got, err := Decode(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if got.Len() != MaxPerUID+1 || !got.Has(Pair{65534, "other/count.txt", "c"}) {
		t.Fatalf("decoded a flooded file: %d pairs, the other user's kept %v", got.Len(), got.Has(Pair{65534, "other/count.txt", "c"}))
	}
}

func TestGlobs(t *testing.T) {
	g := Globs{"*.cnt", "data/count.txt"}
	for p, want := range map[string]bool{"a.cnt": true, "x/y/a.cnt": true, "data/count.txt": true,
		"count.txt": false, "other/data/count.txt": false, "a.cnt.bak": false} {
		if g.Match(p) != want {
			t.Errorf("%s: %v", p, !want)
		}
	}
	if (Globs{"[x"}).Valid() == nil || (Globs{""}).Valid() == nil || g.Valid() != nil {
		t.Fatal("Valid")
	}
}

func TestReads(t *testing.T) {
	r := NewReads(time.Minute)
	r.Note(1, 10)
	if !r.Read(1, 10) || r.Read(1, 11) || r.Read(2, 10) {
		t.Fatal("reads")
	}
	for i := range maxReads + 5 {
		r.Note(uint64(i+100), 1)
	}
	if r.n > maxReads || len(r.seen) > maxReads {
		t.Fatalf("%d entries, %d keys", r.n, len(r.seen))
	}
	r.Note(7, 1)
	r.Note(7, 2)
	n := r.n
	r.Forget(7)
	if r.Read(7, 1) || r.Read(7, 2) || r.n != n-2 {
		t.Fatalf("Forget: read %v %v, %d entries, want %d", r.Read(7, 1), r.Read(7, 2), r.n, n-2)
	}
}

// TestSnapshot: a held session with its waiters in serving order.
func TestSnapshot(t *testing.T) {
	tb := New(long)
	s, _ := enter(t, tb, 7, 10, long)
	for pid := int32(11); pid <= 12; pid++ {
		go enter(t, tb, 7, pid, long)
		for tb.Waiting(7) != int(pid-10) {
			time.Sleep(time.Millisecond)
		}
	}
	got := tb.Snapshot()
	if len(got) != 1 || got[0].Key != 7 || got[0].Holder != 10 || got[0].Open != 1 || len(got[0].Waiters) != 2 ||
		got[0].Waiters[0].ID != 11 || got[0].Waiters[1].ID != 12 || tb.Waiters() != 2 {
		t.Fatalf("snapshot %+v, waiters %d", got, tb.Waiters())
	}
	s.End()
}

// TestClassJudgedReadOnly: a class is judged read-only after
// ReadOnlyAfter sessions ended without a write (one that wrote does not
// count), which lets its waiters go without a session, the first in the
// queue included; a write makes it a writing class for good.
func TestClassJudgedReadOnly(t *testing.T) {
	cs := NewClasses()
	p := Pair{33, "data/bbs.txt", "/usr/bin/perl /cgi/bbs.pl"}
	get, post := cs.Get(p, "GET"), cs.Get(p, "POST")
	if cs.Get(p, "GET") != get || get == post {
		t.Fatal("Get does not keep one class per features")
	}
	tb := New(long)
	s, _ := enter(t, tb, 1, 10, long)
	s.SetClass(post)
	s.MarkWrote()
	s.End()
	for pid := int32(20); pid < 20+ReadOnlyAfter-1; pid++ {
		s, _ := enter(t, tb, 1, pid, long)
		s.SetClass(get)
		s.End()
	}
	if get.ReadOnly() || post.ReadOnly() {
		t.Fatal("judged too early")
	}
	// The last session before the judgement, with two waiters of the
	// class queued: its end lets both go.
	last, _ := enter(t, tb, 1, 30, long)
	last.SetClass(get)
	outs := make(chan Outcome, 2)
	for pid := int32(31); pid <= 32; pid++ {
		go func() {
			s, out, _ := tb.EnterUnless(context.Background(), 1, pid, nil, long, get.Judged())
			if s != nil {
				t.Errorf("pid %d got a session (%v)", pid, out)
			}
			outs <- out
		}()
		for tb.Waiting(1) != int(pid-30) {
			time.Sleep(time.Millisecond)
		}
	}
	last.End()
	for range 2 {
		if out := <-outs; out != Unneeded {
			t.Fatalf("waiter: %v, want Unneeded", out)
		}
	}
	if !get.ReadOnly() || post.ReadOnly() || tb.Len() != 0 {
		t.Fatalf("GET read-only %v, POST read-only %v, %d sessions left", get.ReadOnly(), post.ReadOnly(), tb.Len())
	}
	if _, out, _ := tb.EnterUnless(context.Background(), 1, 40, nil, long, get.Judged()); out != Took {
		t.Fatalf("no session held: %v, want Took", out)
	}
	if !get.Wrote() || get.ReadOnly() || get.Judged() != nil {
		t.Fatal("a write does not end the judgement")
	}
	if get.Wrote() {
		t.Fatal("a writing class reported read-only")
	}
}

// TestClassesBounded: past MaxClasses classes of a pair, or with long
// features, Get returns nil; another pair still gets classes.
func TestClassesBounded(t *testing.T) {
	cs := NewClasses()
	p := Pair{33, "a", "c"}
	for i := range MaxClasses {
		if cs.Get(p, strconv.Itoa(i)) == nil {
			t.Fatalf("class %d refused", i)
		}
	}
	if cs.Get(p, "one more") != nil || cs.Get(Pair{33, "b", "c"}, strings.Repeat("x", MaxFeatures+1)) != nil {
		t.Fatal("not bounded")
	}
	if cs.Get(Pair{33, "b", "c"}, "GET") == nil || len(cs.List()) != MaxClasses+1 {
		t.Fatal("another pair refused")
	}
}

// TestBusyPostponesHold: while its holder is busy (a temporary file
// open, a commit), a session with no open left outlives the hold; once
// done, the hold runs again and ends it.
func TestBusyPostponesHold(t *testing.T) {
	tb := New(20 * time.Millisecond)
	s, _ := enter(t, tb, 1, 10, long)
	done := tb.Busy(10)
	other := tb.Busy(11) // another holder's business keeps nothing
	s.Close()
	time.Sleep(100 * time.Millisecond)
	if s.Ended() {
		t.Fatal("ended by its hold while its holder was busy")
	}
	other()
	done()
	for !s.Ended() {
		time.Sleep(time.Millisecond) // the hold, then the end
	}
	if tb.Held(1) != nil {
		t.Fatal("still held after the hold")
	}
}
