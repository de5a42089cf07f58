package mountwatch

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// end comes once the condition held at two looks a grace apart, and not
// for a condition that held at one look only.
func TestStart(t *testing.T) {
	var gone, looks, ends atomic.Int32
	w := Start(time.Millisecond, 20*time.Millisecond, func() bool {
		looks.Add(1)
		return gone.Load() != 0
	}, func() { ends.Add(1) })
	defer w.Stop()
	require.Eventually(t, func() bool { return looks.Load() > 3 }, 10*time.Second, time.Millisecond)
	assert.Zero(t, ends.Load())
	gone.Store(1)
	require.Eventually(t, func() bool { return ends.Load() > 0 }, 10*time.Second, time.Millisecond)
}

// A condition that held at the first look but not after the grace ends
// nothing; Stop ends a grace at once.
func TestStartPassing(t *testing.T) {
	var calls, ends atomic.Int32
	w := Start(time.Millisecond, 10*time.Millisecond, func() bool {
		return calls.Add(1)%2 == 1 // gone, then back
	}, func() { ends.Add(1) })
	require.Eventually(t, func() bool { return calls.Load() > 10 }, 10*time.Second, time.Millisecond)
	assert.Zero(t, ends.Load())
	w.Stop()

	var looked atomic.Int32
	held := Start(time.Millisecond, time.Hour, func() bool { looked.Add(1); return true }, func() { t.Error("ended") })
	// Stop must end the grace wait (an hour), which begins at the first look.
	require.Eventually(t, func() bool { return looked.Load() > 0 }, time.Minute, time.Millisecond)
	start := time.Now()
	held.Stop()
	assert.Less(t, time.Since(start), time.Minute)
}
