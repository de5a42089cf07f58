package xattr

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func file(t *testing.T, nm string, attrs map[string]string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), nm)
	require.NoError(t, os.WriteFile(p, nil, 0o644))
	for k, v := range attrs {
		if err := unix.Setxattr(p, k, []byte(v), 0); err != nil {
			t.Skipf("no %s here: %v", k, err)
		}
	}
	return p
}

func TestListGet(t *testing.T) {
	p := file(t, "f", map[string]string{"user.a": "1", "user.b": "two"})
	names, err := List(p)
	require.NoError(t, err)
	sort.Strings(names)
	assert.Equal(t, []string{"user.a", "user.b"}, names)
	v, err := Get(p, "user.b")
	require.NoError(t, err)
	assert.Equal(t, "two", string(v))
	_, err = Get(p, "user.none")
	assert.ErrorIs(t, err, unix.ENODATA)
	empty := file(t, "g", nil)
	names, err = List(empty)
	require.NoError(t, err)
	assert.Empty(t, names)
}

// Copy copies every attribute; security.capability only for root.
func TestCopy(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("setting security.capability needs root")
	}
	// vfs_cap_data, revision 2: CAP_NET_BIND_SERVICE permitted.
	capv := make([]byte, 20)
	binary.LittleEndian.PutUint32(capv, 0x02000000)
	binary.LittleEndian.PutUint32(capv[4:], 1<<unix.CAP_NET_BIND_SERVICE)
	src := file(t, "src", map[string]string{"user.a": "1", "security.capability": string(capv)})
	for _, root := range []bool{false, true} {
		dst, err := os.Create(filepath.Join(t.TempDir(), "dst"))
		require.NoError(t, err)
		require.NoError(t, Copy(src, int(dst.Fd()), root))
		names, err := List(dst.Name())
		require.NoError(t, err)
		sort.Strings(names)
		if root {
			assert.Equal(t, []string{"security.capability", "user.a"}, names)
		} else {
			assert.Equal(t, []string{"user.a"}, names, "a non-root writer's copy keeps no capability")
		}
		dst.Close()
	}
}
