package fs_test

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/testfs"
)

// advSmall is what "small" means for the disk usage of a sparse file or
// of the staging directory: far below the logical sizes involved (2^62,
// 1 TiB), far above a few written blocks.
const advSmall = 16 << 20

// advBounded runs fn, failing the test if it has not returned by the
// deadline (a hang or a full copy of a huge file, not a timing check).
func advBounded(t *testing.T, m *testfs.Mount, limit time.Duration, what string, fn func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-ctx.Done():
		advHung(t, m.Dir, what)
		<-done
		t.FailNow()
	}
}

// TestAdvHugeOffset: pwrite at offset 2^62 through the mount. The backing
// file system (ext4: 16 TiB at most) refuses with EFBIG; on one that
// takes it, the result must be a sparse file. Never a huge staging file:
// its disk usage stays small while the fd is open.
func TestAdvHugeOffset(t *testing.T) {
	m := testfs.New(t)
	must(t, os.WriteFile(m.Path("f"), []byte("head\n"), 0o644))
	prev := int64(5)
	for _, off := range []int64{1 << 62, 1<<62 - 1, 1 << 43, 1 << 40} {
		advBounded(t, m, 60*time.Second, "pwrite at a huge offset", func() {
			f, err := os.OpenFile(m.Path("f"), os.O_WRONLY, 0)
			must(t, err)
			_, werr := f.WriteAt([]byte("x"), off)
			n, used := advStagingUsage(t, m.Backing, "staging")
			var st unix.Stat_t
			if err := unix.Fstat(int(f.Fd()), &st); err == nil {
				t.Logf("offset %d: write %v; fstat size %d blocks %d; staging: %d files, %d bytes on disk", off, werr, st.Size, st.Blocks, n, used)
			}
			if used > advSmall {
				t.Errorf("offset %d: staging uses %d bytes while the writer is open", off, used)
			}
			if werr != nil && advErrno(werr) != syscall.EFBIG && advErrno(werr) != syscall.EINVAL {
				t.Errorf("offset %d: write failed with %v, want EFBIG (or success)", off, werr)
			}
			cerr := f.Close()
			var bs unix.Stat_t
			must(t, unix.Lstat(m.BackingPath("f"), &bs))
			t.Logf("offset %d: close %v; committed size %d, %d bytes on disk", off, cerr, bs.Size, bs.Blocks*512)
			if bs.Blocks*512 > advSmall {
				t.Errorf("offset %d: the committed file uses %d bytes: not sparse", off, bs.Blocks*512)
			}
			if werr == nil && cerr == nil && bs.Size != max(prev, off+1) {
				t.Errorf("offset %d: committed size %d, want %d", off, bs.Size, max(prev, off+1))
			}
			if werr != nil && bs.Size != prev {
				t.Errorf("offset %d: a failed write changed the file's size from %d to %d", off, prev, bs.Size)
			}
			prev = bs.Size
		})
	}
	if n, used := advStagingUsage(t, m.Backing, "staging"); n != 0 {
		t.Errorf("staging holds %d files (%d bytes) after every writer closed", n, used)
	}
}

// TestAdvSparse1TiB: a 1 TiB sparse file made directly in BACKING, opened
// for writing through the mount, one byte written at offset 0, closed.
// The copy-up must copy data runs only (bounded by a deadline, not a
// timing assertion) and both staging and the committed file stay sparse.
func TestAdvSparse1TiB(t *testing.T) {
	m := testfs.New(t)
	const size = 1 << 40
	f, err := os.Create(m.BackingPath("big"))
	must(t, err)
	must(t, f.Truncate(size))
	_, err = f.WriteAt([]byte("tail"), size-4) // one data run at the end
	must(t, err)
	must(t, f.Close())

	for _, flags := range []int{os.O_WRONLY, os.O_RDWR} {
		advBounded(t, m, 60*time.Second, "1 TiB sparse copy-up and commit", func() {
			f, err := os.OpenFile(m.Path("big"), flags, 0)
			must(t, err)
			_, err = f.WriteAt([]byte("H"), 0)
			must(t, err)
			n, used := advStagingUsage(t, m.Backing, "staging")
			t.Logf("while open: staging %d files, %d bytes on disk", n, used)
			if used > advSmall {
				t.Errorf("staging uses %d bytes for a 1 TiB sparse file", used)
			}
			must(t, f.Close())
		})
		var st unix.Stat_t
		must(t, unix.Lstat(m.BackingPath("big"), &st))
		t.Logf("committed: size %d, %d bytes on disk", st.Size, st.Blocks*512)
		if st.Size != size || st.Blocks*512 > advSmall {
			t.Errorf("committed: size %d, %d bytes on disk; want %d, sparse", st.Size, st.Blocks*512, size)
		}
		g, err := os.Open(m.Path("big"))
		must(t, err)
		head, tail := make([]byte, 2), make([]byte, 4)
		_, err = g.ReadAt(head, 0)
		must(t, err)
		_, err = g.ReadAt(tail, size-4)
		must(t, err)
		g.Close()
		if string(head) != "H\x00" || string(tail) != "tail" {
			t.Errorf("contents: head %q tail %q", head, tail)
		}
	}
	// Append to it, and truncate it through the mount, too.
	advBounded(t, m, 60*time.Second, "1 TiB sparse append", func() {
		f, err := os.OpenFile(m.Path("big"), os.O_WRONLY|os.O_APPEND, 0)
		must(t, err)
		_, err = f.Write([]byte("+"))
		must(t, err)
		must(t, f.Close())
		must(t, os.Truncate(m.Path("big"), size+10))
	})
	var st unix.Stat_t
	must(t, unix.Lstat(m.BackingPath("big"), &st))
	if st.Size != size+10 || st.Blocks*512 > advSmall {
		t.Errorf("after append and truncate: size %d, %d bytes on disk", st.Size, st.Blocks*512)
	}
}
