package fs_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/safefs/safefs/testfs"
)

// A file replaced directly in BACKING (an operator's deploy, rename over
// the name) while the kernel still holds the old file under the name:
// reads and writes through the mount reach the new file at once, with no
// error (the daemon answers ESTALE, the kernel looks the name up again).
func TestOutsideReplaceSeenAtOnce(t *testing.T) {
	m := testfs.New(t)
	p, b := m.Path("conf"), m.BackingPath("conf")
	require.NoError(t, os.WriteFile(p, []byte("mount 0\n"), 0o644))
	for i := range 50 {
		_, err := os.Stat(p) // the kernel caches the name's inode
		require.NoError(t, err)
		outside := fmt.Sprintf("outside %d\n", i)
		require.NoError(t, os.WriteFile(b+".new", []byte(outside), 0o644))
		require.NoError(t, os.Rename(b+".new", b))

		got, err := os.ReadFile(p)
		require.NoError(t, err, "read right after the outside replace")
		require.Equal(t, outside, string(got))

		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		require.NoError(t, err, "open for append right after the outside replace")
		_, err = f.WriteString("appended\n")
		require.NoError(t, err)
		require.NoError(t, f.Close())
		got, err = os.ReadFile(b)
		require.NoError(t, err)
		require.Equal(t, outside+"appended\n", string(got), "the append landed in the new file")
	}
}
