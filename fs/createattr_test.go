package fs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest/observer"
)

// A create's reply caches the new file's attributes whatever its flags:
// its writer has nothing pending yet, so the kernel's permission check
// of the new file and the opener's fstat ask the daemon nothing before
// the first write (one round trip less per create than asking).
func TestCreateReplyCachesAttrs(t *testing.T) {
	_, _, mnt, logs := mountTraced(t, notDurable)
	for _, c := range []struct {
		name  string
		flags int
	}{
		{"excl", os.O_WRONLY | os.O_CREATE | os.O_EXCL},
		{"trunc", os.O_WRONLY | os.O_CREATE | os.O_TRUNC},
		{"append", os.O_WRONLY | os.O_CREATE | os.O_APPEND},
	} {
		f, err := os.OpenFile(filepath.Join(mnt, c.name), c.flags, 0o644)
		require.NoError(t, err)
		fi, err := f.Stat()
		require.NoError(t, err)
		assert.Zero(t, fi.Size())
		_, err = f.Write([]byte("line\n"))
		require.NoError(t, err)
		require.NoError(t, f.Close())
		assert.Zero(t, getattrsBeforeWrite(t, logs, c.name),
			"%s: GETATTR of the new file between its CREATE and its first WRITE", c.name)
	}
}

// getattrsBeforeWrite counts the GETATTRs of the node that the CREATE of
// name made, received before that node's first WRITE (FUSE request trace).
func getattrsBeforeWrite(t *testing.T, logs *observer.ObservedLogs, name string) int {
	msgs := fuseTrace(logs)
	node, at := replyNode(t, msgs, func(m string) bool {
		return strings.Contains(m, "CREATE n") && strings.Contains(m, `"`+name+`"`)
	})
	if node == "" {
		t.Fatalf("no CREATE of %s in the request trace", name)
	}
	n := 0
	for _, m := range msgs[at+1:] {
		switch {
		case strings.Contains(m, "GETATTR "+node+" "):
			n++
		case strings.Contains(m, "WRITE "+node+" "):
			return n
		}
	}
	t.Fatalf("no WRITE of %s after its CREATE in the request trace", name)
	return 0
}
