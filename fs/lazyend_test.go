package fs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// An append's end line is not synced at its commit (CommitLazy), so a
// rename or removal through the mount, which can make its path name
// another file, must sync it first: else recovery after a machine crash
// could find the record open and its path another file.
func TestLazyEndSyncedBeforeRename(t *testing.T) {
	srv, _, mnt := mountForTest(t)
	jr := srv.r.jr

	for i, change := range []func(p string) error{
		func(p string) error { return os.Rename(p, p+".1") },
		os.Remove,
	} {
		p := filepath.Join(mnt, "log"+string(rune('a'+i)))
		require.NoError(t, os.WriteFile(p, []byte("first\n"), 0o644))
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		require.NoError(t, err)
		_, err = f.WriteString("line\n")
		require.NoError(t, err)
		require.NoError(t, f.Close())
		require.True(t, jr.EndsPending(), "case %d: the append's end line was synced at its commit", i)
		require.NoError(t, change(p))
		require.False(t, jr.EndsPending(), "case %d: the path changed with the append's end line not durable", i)
	}
}
