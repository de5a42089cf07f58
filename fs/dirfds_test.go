package fs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/dirfds"
)

// A directory whose place could not be checked because the daemon is out
// of descriptors is not written through, with that error (EMFILE) for the
// caller and in the log: it did not leave BACKING (that was logged, and
// answered ESTALE, which sent root's commits to rejected/).
func TestWriteDirOutOfDescriptors(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	srv, _, mnt := mountForTest(t, func(o *Options) {
		o.Log = zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), core))
	})
	require.NoError(t, os.Mkdir(filepath.Join(mnt, "d"), 0o755))
	// A lookup in d: d's node has its fd, which writeDir needs no new
	// descriptor for.
	_, err := os.Stat(filepath.Join(mnt, "d", "x"))
	require.True(t, os.IsNotExist(err), "stat of d/x: %v", err)
	c := srv.r.topNode.GetChild("d")
	require.NotNil(t, c, "no node for d")
	n := c.Operations().(*Node)

	// No descriptor left: the walk up from d cannot open "..".
	var lim unix.Rlimit
	require.NoError(t, unix.Getrlimit(unix.RLIMIT_NOFILE, &lim))
	// The lowest free descriptor: a limit at it leaves no other free.
	free, err := unix.Dup(0)
	require.NoError(t, err)
	unix.Close(free)
	require.NoError(t, unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: uint64(free), Max: lim.Max}))
	_, werr := n.writeDir()
	require.NoError(t, unix.Setrlimit(unix.RLIMIT_NOFILE, &lim))

	assert.ErrorIs(t, werr, syscall.EMFILE, "writeDir out of descriptors")
	said := false
	for _, e := range logs.All() {
		text := e.Message + " " + strings.ToLower(fmt.Sprint(e.ContextMap()))
		assert.NotContains(t, text, "no longer inside", "the directory did not leave BACKING")
		if strings.Contains(text, "too many open files") {
			said = true
		}
	}
	assert.True(t, said, "no warning says the daemon is out of descriptors: %v", logs.All())
}

// More directories than dirfds.Kept in use one after another: the daemon
// keeps at most dirfds.Kept of their descriptors, and a directory whose
// descriptor was closed is found again, also after a rename through the
// mount, with the files written in it where they belong.
func TestDirFdsReopened(t *testing.T) {
	_, backing, mnt := mountForTest(t)
	const dirs = dirfds.Kept + 64
	for i := range dirs {
		d := filepath.Join(mnt, fmt.Sprintf("d%03d", i))
		require.NoError(t, os.Mkdir(d, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(d, "f"), []byte(d), 0o644))
	}
	held := 0
	for _, l := range ownFds(t) {
		// The directories themselves, not their files: the last file's
		// handle may not be released yet (RELEASE comes after close).
		if rel, ok := strings.CutPrefix(l, backing+"/d"); ok && !strings.Contains(rel, "/") {
			held++
		}
	}
	t.Logf("%d directories used, %d of their descriptors held", dirs, held)
	assert.LessOrEqual(t, held, dirfds.Kept, "descriptors of idle directories kept")

	// d000 was used first: its descriptor was closed long ago.
	require.NoError(t, os.Rename(filepath.Join(mnt, "d000"), filepath.Join(mnt, "e000")))
	require.NoError(t, os.WriteFile(filepath.Join(mnt, "e000", "g"), []byte("g"), 0o644))
	b, err := os.ReadFile(filepath.Join(backing, "e000", "g"))
	require.NoError(t, err)
	assert.Equal(t, "g", string(b))
	b, err = os.ReadFile(filepath.Join(mnt, "e000", "f"))
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(mnt, "d000"), string(b))
	for i := 1; i < dirs; i += 37 {
		d := fmt.Sprintf("d%03d", i)
		require.NoError(t, os.WriteFile(filepath.Join(mnt, d, "f"), []byte("again"), 0o644))
		b, err := os.ReadFile(filepath.Join(backing, d, "f"))
		require.NoError(t, err)
		assert.Equal(t, "again", string(b), d)
	}
}
