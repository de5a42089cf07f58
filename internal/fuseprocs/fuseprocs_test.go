package fuseprocs

import (
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Once a mount's server exists (Spare), the runtime has a processor for
// each of go-fuse's readers on top of those it had; an operator's
// GOMAXPROCS is left as it is.
func TestSpareProcs(t *testing.T) {
	if os.Getenv("GOMAXPROCS") != "" {
		t.Skip("GOMAXPROCS is set: the daemon leaves it as it is")
	}
	Spare()
	require.NotZero(t, baseProcs)
	require.GreaterOrEqual(t, runtime.GOMAXPROCS(0), baseProcs+fuseReaders(baseProcs)+1)

	t.Setenv("GOMAXPROCS", "1")
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	Spare()
	require.Equal(t, 1, runtime.GOMAXPROCS(0), "raised although GOMAXPROCS is set")
}

// fuseReaders follows go-fuse's bounds: at least 2, at most 16.
func TestFuseReaders(t *testing.T) {
	require.Equal(t, 2, fuseReaders(1))
	require.Equal(t, 2, fuseReaders(2))
	require.Equal(t, 8, fuseReaders(8))
	require.Equal(t, 16, fuseReaders(64))
}

// Requests yield at most once per yieldEvery, whichever reader serves
// them. The times are given: a loaded machine may take longer than
// yieldEvery between two calls.
func TestYieldNowAndThen(t *testing.T) {
	lastYield.Store(0)
	t0 := time.Now().UnixNano()
	require.True(t, yieldDue(t0), "no yield after a long time without one")
	require.False(t, yieldDue(t0+int64(yieldEvery)-1), "yielded again within yieldEvery")
	require.True(t, yieldDue(t0+int64(yieldEvery)), "no yield after yieldEvery")
	require.Equal(t, t0+int64(yieldEvery), lastYield.Load())
}
