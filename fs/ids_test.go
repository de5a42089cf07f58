package fs

import (
	"testing"

	"golang.org/x/sys/unix"
)

// A lookup can register a new node for a file while go-fuse is still
// forgetting the old one (the kernel dropped it and looked the name up
// again). The old node's forget must not drop the file the new node
// serves: a later file on the same backing inode number would get a new
// logical file with the same number, go-fuse would hand out the old node,
// and every open of the name would fail with ESTALE (seen in
// TestResRejectedBounded, about 1 run in 10).
func TestIDsForgetOfOlderNodeKeepsFile(t *testing.T) {
	tab := newIDs()
	st := unix.Stat_t{Dev: 1, Ino: 100, Mode: unix.S_IFREG}
	f := tab.get(&st)
	older, newer := &Node{f: f}, &Node{f: f}
	tab.keep(older)
	tab.keep(newer) // registered before older's forget ran
	if tab.forget(older) {
		t.Fatalf("forget of the older node dropped the file a newer node serves")
	}
	if got := tab.get(&st); got != f {
		t.Fatalf("after the older node's forget, inode 100 maps to another file: the newer node's file is lost")
	}
	if !tab.forget(newer) {
		t.Fatalf("forget of the node that serves the file did not drop it")
	}
	if got := tab.get(&st); got == f {
		t.Fatalf("after the serving node's forget, inode 100 still maps to the forgotten file")
	}
}

// A forget that ran first drops the file; a lookup that had already found
// it then registers it again (keep), so the tables match what go-fuse
// serves.
func TestIDsKeepRestoresDroppedFile(t *testing.T) {
	tab := newIDs()
	st := unix.Stat_t{Dev: 1, Ino: 100, Mode: unix.S_IFREG}
	f := tab.get(&st)
	older := &Node{f: f}
	tab.keep(older)
	if !tab.forget(older) {
		t.Fatalf("forget of the only node kept the file")
	}
	tab.keep(&Node{f: f})
	if got := tab.get(&st); got != f {
		t.Fatalf("keep did not put the served file back: inode 100 maps to a new file")
	}
	other := unix.Stat_t{Dev: 1, Ino: 100, Mode: unix.S_IFREG}
	if g := tab.fresh(&other); g.ino == f.ino {
		t.Fatalf("a new file got number %d, which a live node serves", g.ino)
	}
}
