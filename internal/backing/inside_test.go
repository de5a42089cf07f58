package backing

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A directory below the top is inside, the top itself too; once moved
// out (its fd follows it) it is not.
func TestInside(t *testing.T) {
	base := t.TempDir()
	top := filepath.Join(base, "top")
	require.NoError(t, os.MkdirAll(filepath.Join(top, "a", "b"), 0o755))
	var st unix.Stat_t
	require.NoError(t, unix.Stat(top, &st))
	dev, ino := uint64(st.Dev), st.Ino
	b := openDir(t, filepath.Join(top, "a", "b"))
	assert.NoError(t, Inside(b, dev, ino))
	assert.NoError(t, Inside(openDir(t, top), dev, ino))
	require.NoError(t, os.Rename(filepath.Join(top, "a"), filepath.Join(base, "out")))
	assert.ErrorIs(t, Inside(b, dev, ino), ErrLeft)
	_, err := Fstat(b)
	assert.NoError(t, err, "the caller's fd was closed")
}
