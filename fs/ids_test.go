package fs

import (
	"testing"

	"golang.org/x/sys/unix"
)

// A logical file dropped from the table (its forget raced a lookup, so
// go-fuse may still serve it) and a new file on the same backing inode
// number must not share a go-fuse identity: go-fuse would hand the new
// file's lookup the old node, whose name leads elsewhere, and every open
// would fail with ESTALE (TestResRejectedBounded, about 1 run in 10).
func TestIDsReusedNumberGetsNewIdentity(t *testing.T) {
	tab := newIDs()
	st := unix.Stat_t{Dev: 1, Ino: 100, Mode: unix.S_IFREG}
	old, _ := tab.get(&st)
	tab.drop(old)
	fresh, _ := tab.get(&st)
	if fresh == old {
		t.Fatalf("a dropped file came back from the table")
	}
	if fresh.ino == old.ino && fresh.gen == old.gen {
		t.Fatalf("two logical files share inode %d and generation %d: go-fuse would give both one node", fresh.ino, fresh.gen)
	}
}
