package fs

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func notDurable(o *Options) { o.Durable = false }

// A new file's content is held in memory until its close writes it into
// the empty file the create made (durability=none); whatever needs it as
// a file first moves it to a staging file, and each view stays exact.
func TestNewFileBuffered(t *testing.T) {
	srv, backing, mnt := mountForTest(t, notDurable)
	held := func() int64 { return srv.r.appendBufs.all.Load() }
	body := bytes.Repeat([]byte("0123456789abcdef"), 256) // 4 KiB

	t.Run("in_place", func(t *testing.T) {
		f := create(t, mnt, "a", body)
		assert.EqualValues(t, len(body), held(), "the new file's bytes were not kept in memory")
		fi, err := f.Stat()
		require.NoError(t, err)
		assert.EqualValues(t, len(body), fi.Size(), "the writer's fstat shows what it wrote")
		assert.EqualValues(t, len(body), held(), "fstat moved the bytes to a staging file")
		ino := inoOf(t, backing, "a")
		// No reader here: one whose RELEASE (sent after its close()
		// returns) comes late makes the commit a replace.
		require.NoError(t, f.Close())
		assert.Zero(t, held())
		requireContent(t, backing, "a", body)
		assert.Equal(t, ino, inoOf(t, backing, "a"), "not written into the file the create made")
	})

	t.Run("reader_keeps_the_empty_version", func(t *testing.T) {
		f := create(t, mnt, "b", body)
		r, err := os.Open(filepath.Join(mnt, "b"))
		require.NoError(t, err)
		defer r.Close()
		ino := inoOf(t, backing, "b")
		n, err := r.Read(make([]byte, 16))
		assert.Zero(t, n, "another reader saw pending bytes: %v", err)
		require.NoError(t, f.Close())
		requireContent(t, backing, "b", body)
		assert.NotEqual(t, ino, inoOf(t, backing, "b"), "written in place under an open reader")
		n, err = r.ReadAt(make([]byte, 16), 0)
		assert.Zero(t, n, "the reader opened the empty version: %v", err)
	})

	t.Run("ways_out", func(t *testing.T) {
		f := create(t, mnt, "c", []byte("hello world"))
		_, err := f.WriteAt([]byte("J"), 0) // not after what was written
		require.NoError(t, err)
		assert.Zero(t, held(), "a write elsewhere keeps the bytes in memory")
		require.NoError(t, f.Close())
		requireContent(t, backing, "c", []byte("Jello world"))

		f = create(t, mnt, "d", []byte("hello world"))
		require.NoError(t, f.Truncate(5))
		require.NoError(t, f.Close())
		requireContent(t, backing, "d", []byte("hello"))

		f = create(t, mnt, "e", []byte("hello"))
		buf := make([]byte, 16)
		n, _ := f.ReadAt(buf, 0)
		assert.Equal(t, "hello", string(buf[:n]), "the writer reads what it wrote")
		require.NoError(t, f.Close())
		requireContent(t, backing, "e", []byte("hello"))

		f = create(t, mnt, "g", []byte("hello"))
		old := time.Unix(1_000_000_000, 0)
		require.NoError(t, os.Chtimes(filepath.Join(mnt, "g"), old, old))
		require.NoError(t, f.Close())
		fi, err := os.Stat(filepath.Join(backing, "g"))
		require.NoError(t, err)
		assert.True(t, fi.ModTime().Equal(old), "utimens before close lost at the commit: %v", fi.ModTime())
	})

	t.Run("without_o_trunc", func(t *testing.T) {
		p := filepath.Join(mnt, "i")
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		require.NoError(t, err)
		defer f.Close()
		ino := inoOf(t, backing, "i")
		_, err = f.Write(body)
		require.NoError(t, err)
		assert.EqualValues(t, len(body), held())
		require.NoError(t, f.Close())
		requireContent(t, backing, "i", body)
		assert.Equal(t, ino, inoOf(t, backing, "i"), "not written into the file the create made")

		// A commit between the create and the first write: that write
		// goes over the committed version, as for any writer.
		p = filepath.Join(mnt, "j")
		f, err = os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		require.NoError(t, err)
		defer f.Close()
		require.NoError(t, os.WriteFile(p, []byte("theirs, longer"), 0o644))
		_, err = f.Write([]byte("MINE"))
		require.NoError(t, err)
		require.NoError(t, f.Close())
		requireContent(t, backing, "j", []byte("MINErs, longer"))
	})

	t.Run("empty", func(t *testing.T) {
		f := create(t, mnt, "h", nil)
		require.NoError(t, f.Close())
		requireContent(t, backing, "h", nil)
	})
}

// With durability=full a new file is replaced as any rewrite: its name
// becomes durable with the rename's directory fsync.
func TestNewFileDurable(t *testing.T) {
	_, backing, mnt := mountForTest(t)
	f := create(t, mnt, "a", []byte("whole\n"))
	ino := inoOf(t, backing, "a")
	require.NoError(t, f.Close())
	requireContent(t, backing, "a", []byte("whole\n"))
	assert.NotEqual(t, ino, inoOf(t, backing, "a"), "written in place with durability=full")
}

// Readers through the mount see a new file empty or whole, never a part
// of what its commit writes in place: a reader that comes while half of
// it is written waits for the rest.
func TestNewFileReadersSeeWhole(t *testing.T) {
	srv, backing, mnt := mountForTest(t, notDurable)
	body := bytes.Repeat([]byte("x"), 8<<10)
	half := make(chan struct{})
	got := make(chan []byte, 1)
	waited := false
	at := func(point string) {
		if point != "append-half" {
			return
		}
		close(half)
		// Another process: a stat from this one would wait for the
		// writer's handle, which is busy committing.
		var out bytes.Buffer
		cat := exec.Command("cat", filepath.Join(mnt, "a"))
		cat.Stdout = &out
		if !assert.NoError(t, cat.Start()) {
			got <- nil
			return
		}
		exited := make(chan struct{})
		go func() {
			assert.NoError(t, cat.Wait())
			close(exited)
			got <- out.Bytes()
		}()
		// The commit goes on once the reader waits for the daemon (or
		// read without waiting, and ended).
		waited = awaitInFuse(t, cat.Process.Pid, exited)
	}
	srv.r.atPoint.Store(&at)
	f := create(t, mnt, "a", body)
	require.NoError(t, f.Close())
	<-half
	b := <-got
	assert.True(t, waited, "the reader ended while the commit was stopped half-way: it did not wait for the rest")
	assert.Equal(t, len(body), len(b), "a reader during the commit's write read a part of it")
	requireContent(t, backing, "a", body)
}

// create makes name through the mount with O_TRUNC, as Perl's open >
// does, and writes data; the test closes it.
func create(t *testing.T, mnt, nm string, data []byte) *os.File {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(mnt, nm), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	if len(data) > 0 {
		_, err = f.Write(data)
		require.NoError(t, err)
	}
	return f
}

func inoOf(t *testing.T, backing, nm string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(filepath.Join(backing, nm), &st))
	return st.Ino
}
