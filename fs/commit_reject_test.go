package fs_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/testfs"
)

// Bytes kept in rejected/ are reported at every mount and never removed.
func TestRejectedReportedAtMount(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	m := testfs.New(t, func(o *fs.Options) { o.Log = zap.New(core) })
	kept := m.BackingPath(fs.InternalDir, "rejected", "0123456789abcdef0123456789abcdef")
	require.NoError(t, os.WriteFile(kept, []byte("0123456789"), 0o600))
	m.Remount(t)

	got := logs.FilterMessageSnippet("rejected commits are kept").All()
	require.Len(t, got, 1, "one report at the second mount")
	fields := got[0].ContextMap()
	assert.EqualValues(t, 1, fields["files"])
	assert.EqualValues(t, 10, fields["bytes"])
	b, err := os.ReadFile(kept)
	require.NoError(t, err, "the rejected bytes are still there")
	assert.Equal(t, "0123456789", string(b))
}
