package fs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// An append's end line is not synced at its commit (CommitLazy), and a
// small append's bytes are not synced in the file at all until its
// redo record's checkpoint (redo.go), so a rename or removal through the
// mount, which can make its path name another file, must sync them
// first: else recovery after a machine crash could find the record open
// and its path another file.
func TestLazyEndSyncedBeforeRename(t *testing.T) {
	srv, _, mnt := mountForTest(t)
	r := srv.r
	changes := []func(p string) error{
		func(p string) error { return os.Rename(p, p+".1") },
		os.Remove,
	}
	for i, change := range changes {
		for _, line := range []string{"line\n", strings.Repeat("x", 3*appendBufMax) + "\n"} {
			redo := len(line) <= appendBufMax
			name := fmt.Sprintf("case %d, redo %v", i, redo)
			p := filepath.Join(mnt, fmt.Sprintf("log%d-%v", i, redo))
			require.NoError(t, os.WriteFile(p, []byte("first\n"), 0o644))
			appendLine(t, p, line)
			require.Equal(t, redo, r.redo.Len() > 0, "%s: a small append waits for its checkpoint", name)
			require.Equal(t, !redo, r.jr.EndsPending(), "%s: the append's end line was synced at its commit", name)
			require.NoError(t, change(p))
			require.False(t, r.redo.Len() > 0, "%s: the path changed with the append's bytes not durable", name)
			require.False(t, r.jr.EndsPending(), "%s: the path changed with the append's end line not durable", name)
		}
	}
}
