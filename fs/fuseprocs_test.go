package fs

import (
	"os"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// A mount gives go-fuse's readers processors of their own
// (fuseprocs.Spare): at least 1 + 2 readers + 1 whatever the CPUs.
func TestMountSparesProcs(t *testing.T) {
	if os.Getenv("GOMAXPROCS") != "" {
		t.Skip("GOMAXPROCS is set: the daemon leaves it as it is")
	}
	mountForTest(t)
	require.GreaterOrEqual(t, runtime.GOMAXPROCS(0), 4)
}
