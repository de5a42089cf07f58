package testfs

// Behaviour cases: files unlinked while open, and names recreated.

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func caseUnlinkOpenFile(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "data")
	f := bhOpen(t, p, os.O_RDWR, 0)
	require.NoError(t, unix.Unlink(p))
	bhNoEntry(t, p)
	require.Equal(t, "data", bhReadAll(t, f))
	st := bhFstat(t, f)
	require.Equal(t, uint64(0), uint64(st.Nlink))
	require.Equal(t, int64(4), st.Size)
	_, err := f.WriteAt([]byte("+more"), 4)
	require.NoError(t, err)
	require.Equal(t, "data+more", bhReadAll(t, f))
	st = bhFstat(t, f)
	require.Equal(t, int64(9), st.Size)
	require.Equal(t, uint64(0), uint64(st.Nlink))
	require.NoError(t, unix.Ftruncate(int(f.Fd()), 2))
	require.Equal(t, "da", bhReadAll(t, f))
	bhClose(t, f)
	bhNoEntry(t, p)
	require.Empty(t, bhNames(t, dir))
}

// The scratch-file pattern: create, unlink, then use the fd, fsync
// included. Nothing written is lost while the fd is open.
func caseUnlinkOpenFileFsync(t *testing.T, dir string) {
	p := filepath.Join(dir, "scratch")
	f := bhOpen(t, p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	require.NoError(t, unix.Unlink(p))
	_, err := f.Write([]byte("spilled"))
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.Equal(t, "spilled", bhReadAll(t, f), "read after fsync")
	require.Equal(t, int64(7), bhFstat(t, f).Size)
	_, err = f.Write([]byte(" more"))
	require.NoError(t, err, "write after fsync")
	require.NoError(t, unix.Ftruncate(int(f.Fd()), 9), "ftruncate after fsync")
	require.Equal(t, "spilled m", bhReadAll(t, f))
	bhClose(t, f)
	require.Empty(t, bhNames(t, dir))
}

func caseUnlinkOpenReader(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "still here")
	r := bhOpen(t, p, os.O_RDONLY, 0)
	ino := bhFstat(t, r).Ino
	require.NoError(t, unix.Unlink(p))
	require.Equal(t, "still here", bhReadAll(t, r))
	st := bhFstat(t, r)
	require.Equal(t, uint64(0), uint64(st.Nlink))
	require.Equal(t, ino, st.Ino)
	require.Equal(t, int64(10), st.Size)
}

// A writer whose file was unlinked and made anew under the same name
// does not touch the new file.
func caseUnlinkRecreateWhileWriterOpen(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "first")
	w := bhOpen(t, p, os.O_RDWR, 0)
	_, err := w.WriteAt([]byte("FIRST"), 0)
	require.NoError(t, err)
	require.NoError(t, unix.Unlink(p))
	bhWrite(t, p, "second")
	_, err = w.WriteAt([]byte("!"), 5)
	require.NoError(t, err)
	require.Equal(t, "FIRST!", bhReadAll(t, w))
	bhClose(t, w)
	require.Equal(t, "second", bhRead(t, p))
	require.Equal(t, []string{"f"}, bhNames(t, dir))
}
