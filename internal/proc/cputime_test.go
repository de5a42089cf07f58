package proc

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCPUTimeOf: utime and stime are fields 14 and 15, counted after a
// command that holds spaces and parentheses.
func TestCPUTimeOf(t *testing.T) {
	line := "4242 (safefs (x) y) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 130 0 0 20 0 9 0 100 1000000 500 18446744073709551615\n"
	d, err := cpuTimeOf([]byte(line))
	require.NoError(t, err)
	assert.Equal(t, 3800*time.Millisecond, d)
	_, err = cpuTimeOf([]byte("4242 (x) S 1 2"))
	assert.Error(t, err)
	_, err = cpuTimeOf([]byte("no command"))
	assert.Error(t, err)
}

// TestCPUTimeSelf reads this process's own line.
func TestCPUTimeSelf(t *testing.T) {
	_, err := CPUTime(uint32(os.Getpid()))
	require.NoError(t, err)
	_, err = CPUTime(0)
	assert.Error(t, err)
}
