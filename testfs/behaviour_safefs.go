package testfs

// Behaviour cases of what safefs does on purpose differently from a
// plain file system (SafefsCases): mount only.

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/journal"
)

func caseSnapshotReader(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "old version")
	r := bhOpen(t, p, os.O_RDONLY, 0)
	w := bhOpen(t, p, os.O_WRONLY|os.O_TRUNC, 0)
	_, err := w.Write([]byte("new"))
	require.NoError(t, err)
	bhClose(t, w)
	require.Equal(t, "old version", bhReadAll(t, r))
	require.Equal(t, "new", bhRead(t, p))
}

// fstat on a reader describes the version it reads.
func caseSnapshotReaderFstat(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "old version")
	r := bhOpen(t, p, os.O_RDONLY, 0)
	bhWrite(t, p, "new")
	got := bhReadAll(t, r)
	require.Equal(t, "old version", got)
	require.Equal(t, int64(len(got)), bhFstat(t, r).Size, "fstat size of the reader vs the bytes it reads")
}

func caseUncommittedInvisible(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "committed")
	w := bhOpen(t, p, os.O_RDWR, 0)
	_, err := w.WriteAt([]byte("PENDING!!"), 0)
	require.NoError(t, err)
	// Another open sees the committed version only. (Not another
	// process: forking while holding a dirty fd hangs, see ForkExecWithOpenWriter.)
	require.Equal(t, "committed", bhRead(t, p))
	require.Equal(t, "PENDING!!", bhReadAll(t, w))
	bhClose(t, w)
	require.Equal(t, "PENDING!!", bhRead(t, p))
}

func caseAppendsAtClose(t *testing.T, dir string) {
	p, a, b := bhTwoAppenders(t, dir, "a1", "b1", "a2")
	require.Equal(t, "start\n", bhRead(t, p))
	bhClose(t, b)
	require.Equal(t, "start\nb1\n", bhRead(t, p))
	bhClose(t, a)
	require.Equal(t, "start\nb1\na1\na2\n", bhRead(t, p))
}

func caseInternalDirHidden(t *testing.T, dir string) {
	in := filepath.Join(dir, fs.InternalDir)
	bhWrite(t, filepath.Join(dir, "f"), "x") // a commit used staging/
	require.Equal(t, []string{"f"}, bhNames(t, dir))
	bhNoEntry(t, in)
	_, err := os.ReadDir(filepath.Join(in, journal.StagingDir))
	require.ErrorIs(t, err, unix.ENOENT)
	require.ErrorIs(t, unix.Mkdir(in, 0o755), unix.EPERM)
	_, err = unix.Open(in, unix.O_CREAT|unix.O_WRONLY, 0o644)
	require.ErrorIs(t, err, unix.EPERM)
	require.ErrorIs(t, unix.Symlink("x", in), unix.EPERM)
	require.ErrorIs(t, unix.Link(filepath.Join(dir, "f"), in), unix.EPERM)
	require.ErrorIs(t, unix.Rename(filepath.Join(dir, "f"), in), unix.EPERM)
	require.ErrorIs(t, unix.Unlink(in), unix.ENOENT)
	require.ErrorIs(t, unix.Rmdir(in), unix.ENOENT)
	// Below the top, the name is an ordinary one.
	require.NoError(t, os.Mkdir(filepath.Join(dir, "d"), 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "d", fs.InternalDir), 0o755))
	require.Equal(t, []string{fs.InternalDir}, bhNames(t, filepath.Join(dir, "d")))
}
