package mountinfo

import (
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestMountPoints(t *testing.T) {
	table := `22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
35 22 0:30 / /mnt/with\040space rw - tmpfs none rw
36 22 0:31 / /mnt/back\134slash rw - tmpfs none rw
`
	var points []string
	for _, m := range Parse([]byte(table)) {
		points = append(points, m.Point)
	}
	assert.Equal(t, []string{"/", "/mnt/with space", `/mnt/back\slash`}, points)
}

// Every field a caller uses, escapes undone; lines that are not a
// mount's are left out.
func TestParse(t *testing.T) {
	table := `22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
60 22 0:52 /backing /srv/data\040dir rw,nosuid,nodev,relatime shared:5 master:2 - fuse.safefs /srv/back\011ing rw,user_id=0
x 22 0:53 / /bad rw - tmpfs none rw
61 22 0:54 / /short rw
62 22 0:55 / /nosource rw - tmpfs

`
	ms := Parse([]byte(table))
	require.Len(t, ms, 2)
	assert.Equal(t, Mount{ID: 22, Dev: "0:21", Root: "/", Point: "/", Type: "ext4", Source: "/dev/sda1"}, ms[0])
	assert.Equal(t, Mount{ID: 60, Dev: "0:52", Root: "/backing", Point: "/srv/data dir", Type: "fuse.safefs",
		Source: "/srv/back\ting"}, ms[1])
}

func TestMountID(t *testing.T) {
	var sx unix.Statx_t
	require.NoError(t, unix.Statx(unix.AT_FDCWD, "/proc", 0, unix.STATX_MNT_ID, &sx))
	id, src, ok := Find("/proc", "proc")
	assert.True(t, ok)
	assert.Equal(t, int(sx.Mnt_id), id)
	assert.Equal(t, "proc", src)
	_, _, ok = Find("/proc", "ext4")
	assert.False(t, ok, "another type")
	_, _, ok = Find("/nowhere", "proc")
	assert.False(t, ok)
}

func TestUnescapeMount(t *testing.T) {
	assert.Equal(t, "/mnt/a b\tc\\d", Unescape(`/mnt/a\040b\011c\134d`))
	assert.Equal(t, "/plain", Unescape("/plain"))
	assert.Equal(t, `/odd\04`, Unescape(`/odd\04`), "a cut escape is kept")
}

func TestUnescapeMountField(t *testing.T) {
	assert.Equal(t, "a b", Unescape(`a\040b`))
	assert.Equal(t, `trailing\04`, Unescape(`trailing\04`))
	assert.Equal(t, `not\999octal`, Unescape(`not\999octal`))
}

// A device mounted only in this namespace is not mounted elsewhere; a
// process in a mount namespace of its own (a copy of this one) has it.
func TestElsewhere(t *testing.T) {
	assert.False(t, Elsewhere("4095:1048575"), "a device no mount has")
	ms, err := Read(Self)
	require.NoError(t, err)
	dev := ""
	for _, m := range ms {
		if m.Point == "/proc" {
			dev = m.Dev
		}
	}
	require.NotEmpty(t, dev, "/proc is not in the mount table")
	if Elsewhere(dev) {
		t.Skip("another mount namespace on this machine has /proc's device already")
	}
	cmd := exec.Command("unshare", "-m", "sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skipf("unshare: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	require.Eventually(t, func() bool { return Elsewhere(dev) }, 10*time.Second, 10*time.Millisecond,
		"the copy of the mount in a new namespace was not seen")
}
