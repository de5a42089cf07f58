package caps

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// effective is the calling thread's effective set.
func effective(t *testing.T) uint64 {
	b, err := os.ReadFile("/proc/thread-self/status")
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no CapEff")
	return 0
}

// The capability leaves this thread's effective set, and comes back.
func TestDropEffective(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const c = unix.CAP_CHOWN
	if effective(t)&(1<<c) == 0 {
		t.Skip("CAP_CHOWN is not in this thread's effective set")
	}
	restore, err := DropEffective(c)
	require.NoError(t, err)
	assert.Zero(t, effective(t)&(1<<c), "still effective")
	require.NoError(t, restore())
	assert.NotZero(t, effective(t)&(1<<c), "not restored")
}
