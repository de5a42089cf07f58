package proc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestDescendants: a child and its own child are found below the test
// process; a limit below their count reports that not all were seen.
func TestDescendants(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 30 & echo $!; wait")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var grand uint32
	t.Cleanup(func() {
		if grand != 0 {
			_ = syscall.Kill(int(grand), syscall.SIGKILL) // no process left behind
		}
		_ = cmd.Wait()
	})
	_, err = fmt.Fscan(out, &grand)
	require.NoError(t, err)
	kids, all := Descendants(uint32(os.Getpid()), 64)
	require.True(t, all)
	require.Contains(t, kids, uint32(cmd.Process.Pid))
	require.Contains(t, kids, grand)
	_, all = Descendants(uint32(os.Getpid()), 1)
	require.False(t, all, "two descendants reported whole under a limit of one")
}

// A child of this process is its family (it must not wait for the
// session this process holds); this process is not its child's, nor
// its own.
func TestIsFamily(t *testing.T) {
	self := int32(os.Getpid())
	child := int32(sleeper(t, nil, "30"))
	assert.True(t, IsFamily(self, child))
	assert.False(t, IsFamily(child, self), "a parent is not its child's family")
	assert.False(t, IsFamily(self, self), "one process")
	assert.False(t, IsFamily(0, child), "unknown holder")
}

// A live process is not dying; Status reads its fields.
func TestKilledBySignalLive(t *testing.T) {
	self := uint32(os.Getpid())
	assert.False(t, KilledBySignal(self))
	assert.False(t, KilledBySignal(0), "another pid namespace cannot be checked")
	assert.Equal(t, strconv.Itoa(os.Getpid()), Status(self, "Pid"))
	assert.Equal(t, "", Status(self, "NoSuchField"))
	assert.Equal(t, "", Status(0, "Pid"))
}

// Locks a process holds are seen in its fdinfo; requests are not held.
func TestHoldsLock(t *testing.T) {
	plain := sleeper(t, nil, "30")
	held, known := HoldsLock(plain)
	assert.False(t, held)
	assert.True(t, known)

	f, err := os.Create(filepath.Join(t.TempDir(), "lock"))
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_EX))
	held, known = HoldsLock(uint32(os.Getpid()))
	assert.True(t, held)
	assert.True(t, known)

	held, known = HoldsLock(1 << 30) // no such process
	assert.True(t, held, "unknown counts as held: nothing is learned")
	assert.False(t, known)
}
