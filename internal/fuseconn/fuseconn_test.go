package fuseconn

import (
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestOf(t *testing.T) {
	dir := t.TempDir()
	var st unix.Stat_t
	require.NoError(t, unix.Stat(dir, &st))
	conn, ok := Of(dir)
	assert.True(t, ok)
	assert.Equal(t, unix.Minor(st.Dev), conn)
	_, ok = Of(dir + "/missing")
	assert.False(t, ok)
}

// An unknown or gone connection has no directory, and is mounted
// nowhere.
func TestGone(t *testing.T) {
	_, err := Dir(0)
	assert.Error(t, err)
	assert.False(t, MountedElsewhere(0))
	if os.Geteuid() != 0 {
		t.Skip("fusectl may need mounting: root only")
	}
	const gone = 1048575 // the largest minor: no connection has it
	_, err = Dir(gone)
	assert.True(t, errors.Is(err, os.ErrNotExist), "%v", err)
	assert.False(t, MountedElsewhere(gone))
}
