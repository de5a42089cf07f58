package fs

import (
	"sort"
	"testing"
)

// The book keeps a file's key while a lock is held (a rename does not
// move it) and forgets the file when no lock is held or asked for.
func TestLockBookKey(t *testing.T) {
	var b lockBook
	f := &file{}
	o := lockOwner{id: 7}
	fl := b.begin(f, "old")
	b.end(f, fl, o, holder{pid: 42}, true)
	if !b.holds(f, o) || !b.heldBy(42) {
		t.Fatal("owner not recorded")
	}
	if fl2 := b.begin(f, "new"); fl2.key != "old" {
		t.Fatalf("key %q while locked, want old", fl2.key)
	} else {
		b.end(f, fl2, o, holder{pid: 42}, false)
	}
	if b.holds(f, o) || b.heldBy(42) || len(b.files) != 0 {
		t.Fatalf("not forgotten after the last unlock: %+v", b.files)
	}
	if fl3 := b.begin(f, "new"); fl3.key != "new" {
		t.Fatalf("key %q after all unlocks, want new", fl3.key)
	}
}

// flock owners are numbered per handle until its release.
func TestLockBookFlockIDs(t *testing.T) {
	var b lockBook
	h1, h2 := &handle{}, &handle{}
	if b.flockID(h1, false) != 0 {
		t.Fatal("a handle that never locked has an owner")
	}
	id1, id2 := b.flockID(h1, true), b.flockID(h2, true)
	if id1 == 0 || id1 == id2 || b.flockID(h1, false) != id1 {
		t.Fatalf("ids %d %d", id1, id2)
	}
	b.dropFlock(h1)
	if b.flockID(h1, false) != 0 {
		t.Fatal("kept after release")
	}
	if id3 := b.flockID(h1, true); id3 == id1 || id3 == id2 {
		t.Fatalf("number %d given again", id3)
	}
}

// An fcntl owner still holding when its handle is released is an open
// file's (OFD); one that unlocked (as at every close) is forgotten.
func TestLockBookOFD(t *testing.T) {
	var b lockBook
	h1, h2 := &handle{}, &handle{}
	b.noteVia(h1, 1)
	b.noteVia(h1, 2)
	b.noteVia(h2, 2)
	b.forget(2)
	if got := b.takeVia(h2); len(got) != 0 {
		t.Fatalf("h2 after its owner unlocked: %v", got)
	}
	got := b.takeVia(h1)
	sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
	if len(got) != 1 || got[0] != 1 {
		t.Fatalf("h1: %v, want [1]", got)
	}
	if len(b.takeVia(h1)) != 0 {
		t.Fatal("taken twice")
	}
}

// A process whose lock was tied to an earlier lease has lost it, on
// whichever file it is; one tied to the commit's lease, or another
// process, has not.
func TestLockBookLostBy(t *testing.T) {
	var b lockBook
	lockFile, data := &file{}, &file{}
	fl := b.begin(lockFile, "counter.lock")
	b.end(lockFile, fl, lockOwner{id: 1, flock: true}, holder{pid: 42, lease: 7}, true)
	fl = b.begin(data, "counter")
	b.end(data, fl, lockOwner{id: 2}, holder{pid: 43, lease: 8}, true)
	if !b.lostBy(42, 8) {
		t.Fatal("a lock of lease 7 kept by a commit fenced with lease 8")
	}
	if b.lostBy(42, 7) || b.lostBy(43, 8) || b.lostBy(44, 8) {
		t.Fatal("a live lock, or a process without locks, counted as lost")
	}
}

// A flock held only through handles closed since their last use does
// not count as held by its process: its RELEASE is on the way.
func TestLockBookHeldByClosedFlock(t *testing.T) {
	var b lockBook
	f, h := &file{}, &handle{}
	o := lockOwner{id: b.flockID(h, true), flock: true}
	b.end(f, b.begin(f, "k"), o, holder{pid: 42}, true)
	if !b.heldBy(42) {
		t.Fatal("a flock through an open handle is not held")
	}
	h.flushed.Store(true)
	if b.heldBy(42) {
		t.Fatal("a flock whose handle was closed still counts as held")
	}
}
