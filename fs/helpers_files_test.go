package fs

// Helpers shared by the package's tests: content written and checked
// through the mount, and the descriptors this process (the daemon) holds.

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func requireContent(t *testing.T, backing, nm string, want []byte) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(backing, nm))
	require.NoError(t, err)
	require.Equal(t, string(want), string(b))
}

// appendLine appends one small line through the mount: a redo record
// with durability=full.
func appendLine(t *testing.T, p, line string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	require.NoError(t, err)
	_, err = f.WriteString(line)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// heldOf counts this process's descriptors (the daemon's) of path.
func heldOf(t *testing.T, path string) int {
	n := 0
	for _, l := range ownFds(t) {
		if l == path {
			n++
		}
	}
	return n
}

// ownFds maps this process's open descriptors to what they name
// (/proc/self/fd); one closed meanwhile is left out.
func ownFds(t *testing.T) map[int]string {
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	fds := map[int]string{}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		require.NoError(t, err)
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil {
			fds[fd] = l
		}
	}
	return fds
}
