package fs_test

// Raw files (rawfile.go, docs/sqlite.md): files that keep their own
// consistency are read and written in place. The maps are made in a
// Python helper process, never in the test process, which serves the
// mount (see mmap_test.go).

import (
	"bytes"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/testfs"
)

// sqliteHead is the first bytes of a SQLite database, padded to a page.
func sqliteHead() []byte {
	return append([]byte("SQLite format 3\x00"), make([]byte, 4096-16)...)
}

// rawModes are the ways a raw file is served: passed through (the
// default), from the raw node's page cache (passthrough off), and with
// one kernel inode per file (cache=direct).
var rawModes = []struct {
	name string
	edit func(*fs.Options)
}{
	{"passthrough", func(*fs.Options) {}},
	{"pagecache", func(o *fs.Options) { o.Passthrough = false }},
	{"cache=direct", func(o *fs.Options) { o.VersionCache, o.Passthrough = false, false }},
}

func requirePython(t *testing.T) string {
	t.Helper()
	const py = "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is missing, and CI is set", py)
		}
		t.Skipf("%s is missing", py)
	}
	return py
}

// shmScript uses a -shm file as SQLite does: the parent grows it by
// writing its last byte and maps it shared; a child process opens it
// itself, must see its size and the parent's stores through its own map,
// stores its own, then grows it and stores past the old end; the parent
// must see all of it through its maps. A SIGBUS kills either process.
const shmScript = `
import mmap, os, sys
path = sys.argv[1]
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
os.ftruncate(fd, 0)
os.pwrite(fd, b"\0", 32767)
m = mmap.mmap(fd, 32768, mmap.MAP_SHARED)
m[100:108] = b"PARENT01"
pid = os.fork()
if pid == 0:
    cfd = os.open(path, os.O_RDWR)
    size = os.fstat(cfd).st_size
    if size != 32768:
        print("child: size", size); os._exit(1)
    c = mmap.mmap(cfd, 32768, mmap.MAP_SHARED)
    if c[100:108] != b"PARENT01":
        print("child: read", c[100:108]); os._exit(1)
    c[200:208] = b"CHILD001"
    os.pwrite(cfd, b"\0", 65535)
    c2 = mmap.mmap(cfd, 65536, mmap.MAP_SHARED)
    c2[40000:40008] = b"CHILDBIG"
    c.flush(); c2.flush()
    os._exit(0)
_, status = os.waitpid(pid, 0)
if status != 0:
    print("child ended with status", status); sys.exit(1)
if m[200:208] != b"CHILD001":
    print("parent: read", m[200:208]); sys.exit(1)
if os.fstat(fd).st_size != 65536:
    print("parent: size", os.fstat(fd).st_size); sys.exit(1)
m2 = mmap.mmap(fd, 65536, mmap.MAP_SHARED)
if m2[40000:40008] != b"CHILDBIG":
    print("parent: read", m2[40000:40008]); sys.exit(1)
m.flush(); m2.flush()
print("ok")
`

// TestRawShmSharedMaps: the -shm file of a database (a WAL
// process died of SIGBUS, and others lost updates) is one file for every
// process: its size is the backing file's at once, each process's shared
// map shows the others' stores, it grows by a write past its end, and
// the stores are in the backing file.
func TestRawShmSharedMaps(t *testing.T) {
	py := requirePython(t)
	for _, mode := range rawModes {
		t.Run(mode.name, func(t *testing.T) {
			m := testfs.New(t, mode.edit)
			require.NoError(t, os.WriteFile(m.Path("w.db"), sqliteHead(), 0o644))
			out, err := exec.Command(py, "-c", shmScript, m.Path("w.db-shm")).CombinedOutput()
			require.NoError(t, err, "%s", out)
			require.Equal(t, "ok\n", string(out))
			b, err := os.ReadFile(m.BackingPath("w.db-shm"))
			require.NoError(t, err)
			require.Len(t, b, 65536)
			assert.Equal(t, "PARENT01", string(b[100:108]))
			assert.Equal(t, "CHILD001", string(b[200:208]))
			assert.Equal(t, "CHILDBIG", string(b[40000:40008]))
		})
	}
}

func backingIno(t *testing.T, p string) uint64 {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Stat(p, &st))
	return st.Ino
}

// readBacking reads n bytes at off of the backing file p.
func readBacking(t *testing.T, p string, off int64, n int) []byte {
	t.Helper()
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	b := make([]byte, n)
	k, _ := f.ReadAt(b, off)
	return b[:k]
}

// TestRawDatabaseInPlace: a database (found by its header) is written in
// place: a write is in the backing file before the writer closes, its
// size is the file's at once, and the backing inode stays (no rename
// that would leave other connections on the replaced one).
func TestRawDatabaseInPlace(t *testing.T) {
	for _, mode := range rawModes {
		t.Run(mode.name, func(t *testing.T) {
			m := testfs.New(t, mode.edit)
			require.NoError(t, os.WriteFile(m.Path("a.db"), sqliteHead(), 0o644))
			ino := backingIno(t, m.BackingPath("a.db"))

			f, err := os.OpenFile(m.Path("a.db"), os.O_RDWR, 0)
			require.NoError(t, err)
			_, err = f.WriteAt([]byte("page two"), 4096)
			require.NoError(t, err)
			assert.Equal(t, "page two", string(readBacking(t, m.BackingPath("a.db"), 4096, 8)), "in BACKING before close")
			st, err := f.Stat()
			require.NoError(t, err)
			assert.EqualValues(t, 4104, st.Size())
			other, err := os.ReadFile(m.Path("a.db"))
			require.NoError(t, err)
			assert.Equal(t, "page two", string(other[4096:]), "another open reads it")
			require.NoError(t, f.Sync())
			require.NoError(t, f.Close())
			require.NoError(t, os.Truncate(m.Path("a.db"), 4096), "truncate(path)")
			bst, err := os.Stat(m.BackingPath("a.db"))
			require.NoError(t, err)
			assert.EqualValues(t, 4096, bst.Size())
			assert.Equal(t, ino, backingIno(t, m.BackingPath("a.db")), "the backing inode stays")
			assert.Positive(t, m.Stats().RawFiles)
		})
	}
}

// lockAt takes an fcntl lock of typ on one byte at off through f.
func lockAt(t *testing.T, f *os.File, typ int16, off int64) {
	t.Helper()
	lk := unix.Flock_t{Type: typ, Whence: 0, Start: off, Len: 1}
	require.NoError(t, unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk))
}

const pendingByte = 0x40000000

// TestRawNewDatabaseByLock: a new, empty database becomes raw at its
// creator's first lock at SQLite's PENDING byte, before it has a header:
// what the creator writes next is in place. A lock there through a
// reader, a lock there on a file with other content, and a lock at byte
// 0 change nothing: those files keep their atomic replace.
func TestRawNewDatabaseByLock(t *testing.T) {
	m := testfs.New(t)
	db, err := os.OpenFile(m.Path("new.db"), os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	defer db.Close()
	lockAt(t, db, unix.F_RDLCK, pendingByte)
	_, err = db.WriteAt(sqliteHead(), 0)
	require.NoError(t, err)
	assert.Equal(t, sqliteHead()[:16], readBacking(t, m.BackingPath("new.db"), 0, 16), "the creator's write in BACKING before close")

	write := func(name string, content []byte, lock func(*os.File)) {
		require.NoError(t, os.WriteFile(m.Path(name), content, 0o644))
		f, err := os.OpenFile(m.Path(name), os.O_RDWR, 0)
		require.NoError(t, err)
		defer f.Close()
		lock(f)
		_, err = f.WriteAt([]byte("pending"), 0)
		require.NoError(t, err)
		assert.Equal(t, string(content), string(readBacking(t, m.BackingPath(name), 0, 64)), "%s: BACKING before close", name)
	}
	write("byte0.db", nil, func(f *os.File) { lockAt(t, f, unix.F_WRLCK, 0) })
	write("text.txt", []byte("1\n"), func(f *os.File) { lockAt(t, f, unix.F_WRLCK, pendingByte) })
	write("read.db", nil, func(*os.File) {
		r, err := os.Open(m.Path("read.db"))
		require.NoError(t, err)
		defer r.Close()
		lockAt(t, r, unix.F_RDLCK, pendingByte)
	})
	assert.EqualValues(t, 1, m.Stats().RawFiles, "only new.db is raw")
}

// TestRawPendingWriterAtSwitch: a file that becomes raw while another
// handle has pending bytes: those stay pending (no half-written version
// is published for it), and its close publishes them in place, so the
// raw handle, open on the backing inode, reads them.
func TestRawPendingWriterAtSwitch(t *testing.T) {
	for _, mode := range rawModes {
		t.Run(mode.name, func(t *testing.T) {
			m := testfs.New(t, mode.edit)
			require.NoError(t, os.WriteFile(m.Path("t.db"), nil, 0o644))
			ino := backingIno(t, m.BackingPath("t.db"))
			w, err := os.OpenFile(m.Path("t.db"), os.O_RDWR, 0)
			require.NoError(t, err)
			_, err = w.WriteAt([]byte("pending"), 0)
			require.NoError(t, err)

			db, err := os.OpenFile(m.Path("t.db"), os.O_RDWR, 0)
			require.NoError(t, err)
			defer db.Close()
			lockAt(t, db, unix.F_RDLCK, pendingByte)
			b := make([]byte, 16)
			n, _ := db.ReadAt(b, 0)
			assert.Zero(t, n, "the other handle's pending bytes")

			require.NoError(t, w.Close())
			assert.Equal(t, ino, backingIno(t, m.BackingPath("t.db")), "published in place")
			n, _ = db.ReadAt(b, 0)
			assert.Equal(t, "pending", string(b[:n]))
			_, err = db.WriteAt([]byte("raw"), 7)
			require.NoError(t, err)
			assert.Equal(t, "pendingraw", string(readBacking(t, m.BackingPath("t.db"), 0, 64)))
		})
	}
}

// TestRawSiblingByName: a file named like a database's journal, WAL or
// index, next to that database, is raw from its creation; the same
// suffix without the database beside it is not.
func TestRawSiblingByName(t *testing.T) {
	m := testfs.New(t)
	require.NoError(t, os.WriteFile(m.Path("s.db"), sqliteHead(), 0o644))
	for _, tc := range []struct {
		name string
		raw  bool
	}{
		{"s.db-journal", true},
		{"s.db-wal", true},
		{"s.db-shm", true},
		{"nobase-wal", false},
		{"s.db-journal.txt", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := os.OpenFile(m.Path(tc.name), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
			require.NoError(t, err)
			defer f.Close()
			_, err = f.Write([]byte("journal"))
			require.NoError(t, err)
			got := readBacking(t, m.BackingPath(tc.name), 0, 16)
			if tc.raw {
				assert.Equal(t, "journal", string(got), "in BACKING before close")
			} else {
				assert.Empty(t, got, "pending until close")
			}
		})
	}
	assert.True(t, bytes.Equal(sqliteHead(), readBacking(t, m.BackingPath("s.db"), 0, 4096)), "the database itself untouched")
}

// TestRawSetIDDropped: a non-root writer's open of a raw file takes its
// set-uid bit off before its writes land (contract 11): its stores
// through a shared map reach the file with no write(2) at which the
// kernel would clear it, and the daemon writes with root's credentials.
func TestRawSetIDDropped(t *testing.T) {
	py := requirePython(t)
	www := testfs.LookupUser(t, "www-data")
	for _, mode := range rawModes {
		t.Run(mode.name, func(t *testing.T) {
			m := testfs.New(t, mode.edit)
			p := m.Path("suid.db")
			require.NoError(t, os.WriteFile(p, sqliteHead(), 0o644))
			require.NoError(t, unix.Chmod(p, 0o4666))
			st, err := os.Stat(m.BackingPath("suid.db"))
			require.NoError(t, err)
			require.NotZero(t, st.Mode()&os.ModeSetuid, "set-uid set")
			// Through a shared map: no write(2) for the kernel to clear
			// the bits at.
			cmd := testfs.AsUser(exec.Command(py, "-c", `
import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
m = mmap.mmap(fd, 4096, mmap.MAP_SHARED)
m[100:103] = b"www"
m.flush()
`, p), www)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			assert.Equal(t, "www", string(readBacking(t, m.BackingPath("suid.db"), 100, 3)))
			st, err = os.Stat(m.BackingPath("suid.db"))
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o666), st.Mode().Perm()|st.Mode()&os.ModeSetuid, "set-uid taken off")
		})
	}
}
