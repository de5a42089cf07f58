package lockbook

import (
	"sort"
	"sync/atomic"
	"testing"
)

// file and handle stand for fs's logical files and open files.
type (
	file   struct{ _ byte }
	handle struct{ flushed atomic.Bool }
	book   = Book[*file, *handle]
)

func (h *handle) ClosedSinceUse() bool { return h.flushed.Load() }

// The book keeps a file's key while a lock is held (a rename does not
// move it) and forgets the file when no lock is held or asked for.
func TestLockBookKey(t *testing.T) {
	var b book
	f := &file{}
	o := Owner{ID: 7}
	fl := b.Begin(f, "old")
	b.End(f, fl, o, Holder{Pid: 42}, true)
	if !b.Holds(f, o) || !b.HeldBy(42) {
		t.Fatal("owner not recorded")
	}
	if fl2 := b.Begin(f, "new"); fl2.Key != "old" {
		t.Fatalf("key %q while locked, want old", fl2.Key)
	} else {
		b.End(f, fl2, o, Holder{Pid: 42}, false)
	}
	if b.Holds(f, o) || b.HeldBy(42) || len(b.files) != 0 {
		t.Fatalf("not forgotten after the last unlock: %+v", b.files)
	}
	if fl3 := b.Begin(f, "new"); fl3.Key != "new" {
		t.Fatalf("key %q after all unlocks, want new", fl3.Key)
	}
}

// flock owners are numbered per handle until its release.
func TestLockBookFlockIDs(t *testing.T) {
	var b book
	h1, h2 := &handle{}, &handle{}
	if b.FlockID(h1, false) != 0 {
		t.Fatal("a handle that never locked has an owner")
	}
	id1, id2 := b.FlockID(h1, true), b.FlockID(h2, true)
	if id1 == 0 || id1 == id2 || b.FlockID(h1, false) != id1 {
		t.Fatalf("ids %d %d", id1, id2)
	}
	b.DropFlock(h1)
	if b.FlockID(h1, false) != 0 {
		t.Fatal("kept after release")
	}
	if id3 := b.FlockID(h1, true); id3 == id1 || id3 == id2 {
		t.Fatalf("number %d given again", id3)
	}
}

// An fcntl owner still holding when its handle is released is an open
// file's (OFD); one that unlocked (as at every close) is forgotten.
func TestLockBookOFD(t *testing.T) {
	var b book
	h1, h2 := &handle{}, &handle{}
	b.NoteVia(h1, 1)
	b.NoteVia(h1, 2)
	b.NoteVia(h2, 2)
	b.Forget(2)
	if got := b.TakeVia(h2); len(got) != 0 {
		t.Fatalf("h2 after its owner unlocked: %v", got)
	}
	got := b.TakeVia(h1)
	sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
	if len(got) != 1 || got[0] != 1 {
		t.Fatalf("h1: %v, want [1]", got)
	}
	if len(b.TakeVia(h1)) != 0 {
		t.Fatal("taken twice")
	}
}

// A process whose lock was tied to an earlier lease has lost it, on
// whichever file it is; one tied to the commit's lease, or another
// process, has not.
func TestLockBookLostBy(t *testing.T) {
	var b book
	lockFile, data := &file{}, &file{}
	fl := b.Begin(lockFile, "counter.lock")
	b.End(lockFile, fl, Owner{ID: 1, Flock: true}, Holder{Pid: 42, Lease: 7}, true)
	fl = b.Begin(data, "counter")
	b.End(data, fl, Owner{ID: 2}, Holder{Pid: 43, Lease: 8}, true)
	if !b.LostBy(42, 8) {
		t.Fatal("a lock of lease 7 kept by a commit fenced with lease 8")
	}
	if b.LostBy(42, 7) || b.LostBy(43, 8) || b.LostBy(44, 8) {
		t.Fatal("a live lock, or a process without locks, counted as lost")
	}
}

// A flock held only through handles closed since their last use does
// not count as held by its process: its RELEASE is on the way.
func TestLockBookHeldByClosedFlock(t *testing.T) {
	var b book
	f, h := &file{}, &handle{}
	o := Owner{ID: b.FlockID(h, true), Flock: true}
	b.End(f, b.Begin(f, "k"), o, Holder{Pid: 42}, true)
	if !b.HeldBy(42) {
		t.Fatal("a flock through an open handle is not held")
	}
	h.flushed.Store(true)
	if b.HeldBy(42) {
		t.Fatal("a flock whose handle was closed still counts as held")
	}
}

// A flock owner's conflict is with closed holders only when every other
// flock owner of the file is closed since its last use, or released.
func TestLockBookClosedHolders(t *testing.T) {
	var b book
	f, h1, h2 := &file{}, &handle{}, &handle{}
	o1 := Owner{ID: b.FlockID(h1, true), Flock: true}
	o2 := Owner{ID: b.FlockID(h2, true), Flock: true}
	b.End(f, b.Begin(f, "k"), o2, Holder{Pid: 43}, true)
	if b.ClosedHolders(f, o1) {
		t.Fatal("an open holder counted as closed")
	}
	h2.flushed.Store(true)
	if !b.ClosedHolders(f, o1) {
		t.Fatal("a holder closed since its use not counted as closed")
	}
	if b.ClosedHolders(f, o2) {
		t.Fatal("an owner is its own closed holder")
	}
	h2.flushed.Store(false)
	b.DropFlock(h2) // released: no longer numbered
	if !b.ClosedHolders(f, o1) {
		t.Fatal("a released holder not counted as closed")
	}
	if b.ClosedHolders(&file{}, o1) {
		t.Fatal("a file without locks has closed holders")
	}
}
