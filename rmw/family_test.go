package rmw

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// A family pair is a pair too, survives Encode/Decode, and an old file
// (no family word) still parses.
func TestLearnedFamily(t *testing.T) {
	l := NewLearned()
	p := Pair{UID: 33, Path: "data/f", Cmd: "/usr/bin/dash /s.sh"}
	q := Pair{UID: 33, Path: "data/f", Cmd: "/usr/bin/perl /c.pl"}
	if !l.AddFamily(p) || l.AddFamily(p) || !l.Add(q) || !l.AddFamily(q) {
		t.Fatal("AddFamily/Add answers")
	}
	if !l.Has(p) || !l.IsFamily(p) || !l.HasFamilyPath(33, "data/f") || l.HasFamilyPath(34, "data/f") {
		t.Fatal("family pair not found")
	}
	d, err := Decode(bytes.NewReader(l.Encode()))
	if err != nil || !d.IsFamily(p) || !d.IsFamily(q) || d.Len() != 2 {
		t.Fatalf("round trip: %v %q", err, l.Encode())
	}
	old, err := Decode(bytes.NewReader([]byte(`33 "data/f" "/usr/bin/perl /c.pl"` + "\n")))
	if err != nil || !old.Has(q) || old.IsFamily(q) {
		t.Fatalf("old format: %v", err)
	}
	if _, err := Decode(bytes.NewReader([]byte(`33 "data/f" "/x" kin` + "\n"))); err == nil {
		t.Fatal("a bad last word parsed")
	}
}

// ChildRead finds the read of a child of a given process.
func TestReadsChildRead(t *testing.T) {
	r := NewReads(time.Minute)
	r.NoteChild(1, 100, 50)
	r.Note(1, 101)
	if got := r.ChildRead(1, 50); got != 100 {
		t.Fatalf("ChildRead = %d, want 100", got)
	}
	if r.ChildRead(1, 0) != 0 || r.ChildRead(1, 51) != 0 || r.ChildRead(2, 50) != 0 {
		t.Fatal("ChildRead found a read it should not")
	}
}

// Move takes a session and its waiters to the file that replaced its
// own: the waiter, granted, holds a session on the new key.
func TestTableMove(t *testing.T) {
	tb := New(time.Hour)
	s, _, _ := tb.Enter(context.Background(), 1, 10, nil, time.Hour)
	got := make(chan *Session)
	go func() {
		w, _, _ := tb.Enter(context.Background(), 1, 20, nil, time.Hour)
		got <- w
	}()
	for tb.Waiting(1) == 0 {
		time.Sleep(time.Millisecond)
	}
	if tb.Move(1, 2) != s || s.Key() != 2 || tb.Held(1) != nil || tb.Waiting(2) != 1 {
		t.Fatal("not moved")
	}
	s.End()
	if w := <-got; w == nil || w.Key() != 2 || w.Holder != 20 {
		t.Fatalf("waiter got %+v", w)
	}
	if tb.Move(5, 6) != nil {
		t.Fatal("moved a session that is not there")
	}
}

// Resolve follows renames, and Forget cuts them.
func TestMoves(t *testing.T) {
	ms := NewMoves(time.Minute)
	ms.Add(1, 2, "a")
	ms.Add(2, 3, "a")
	if k, p := ms.Resolve(1); k != 3 || p != "a" {
		t.Fatalf("Resolve(1) = %d %q", k, p)
	}
	if k, p := ms.Resolve(7); k != 7 || p != "" {
		t.Fatalf("Resolve(7) = %d %q", k, p)
	}
	ms.Forget(3)
	if k, _ := ms.Resolve(1); k != 2 {
		t.Fatalf("after Forget(3): Resolve(1) = %d, want 2", k)
	}
}

// Rearm restarts the hold of its holder's sessions with no open left,
// and only those.
func TestTableRearm(t *testing.T) {
	tb := New(time.Hour)
	s, _, _ := tb.Enter(context.Background(), 1, 10, nil, time.Hour)
	open, _, _ := tb.Enter(context.Background(), 2, 10, nil, time.Hour)
	s.Close()
	gen, openGen := s.gen, open.gen
	tb.Rearm(11)
	if s.gen != gen {
		t.Fatal("another holder's Rearm restarted the hold")
	}
	tb.Rearm(10)
	if s.gen != gen+1 || s.timer == nil || open.gen != openGen || open.timer != nil {
		t.Fatalf("Rearm: gen %d (was %d), open session's gen %d (was %d)", s.gen, gen, open.gen, openGen)
	}
	s.End()
	open.End()
}
