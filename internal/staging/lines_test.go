package staging

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The last newline between from and to is found reading back from to,
// across reads of growing size; none is -1.
func TestLastNewline(t *testing.T) {
	long := strings.Repeat("x", 3*lineScan)
	content := "a\nbb\n" + long + "\nccc" + long
	p := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	size := int64(len(content))
	want := int64(strings.LastIndexByte(content, '\n'))
	for _, tc := range []struct {
		from, to, want int64
	}{
		{0, size, want},
		{want + 1, size, -1},
		{0, 4, 1},
		{0, 5, 4},
		{2, 4, -1},
		{0, 0, -1},
	} {
		got, err := LastNewline(f, tc.from, tc.to)
		require.NoError(t, err)
		assert.Equal(t, tc.want, got, "LastNewline(%d, %d)", tc.from, tc.to)
	}
}

// Write-back of a file's range starts without an error, and without
// changing its bytes.
func TestStartWriteback(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	b := bytes.Repeat([]byte("y"), 1<<20)
	require.NoError(t, os.WriteFile(p, b, 0o600))
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	StartWriteback(f, 0, int64(len(b)))
	got, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, b, got)
}
