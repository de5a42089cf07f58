package fs

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
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
	kids, all := descendants(uint32(os.Getpid()), 64)
	require.True(t, all)
	require.Contains(t, kids, uint32(cmd.Process.Pid))
	require.Contains(t, kids, grand)
	_, all = descendants(uint32(os.Getpid()), 1)
	require.False(t, all, "two descendants reported whole under a limit of one")
}
