package lockmgr

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Outcome-forcing timeouts: the holder never releases while they run, so
// their length only affects speed, never the result.
const forcedTimeout = 10 * time.Millisecond

type result struct {
	g   *Grant
	err error
}

func lockAsync(ctx context.Context, m *Manager, keys ...uint64) <-chan result {
	ch := make(chan result, 1)
	go func() {
		g, err := m.Lock(ctx, keys...)
		ch <- result{g, err}
	}()
	return ch
}

func mustLock(t *testing.T, m *Manager, keys ...uint64) *Grant {
	t.Helper()
	g, err := m.Lock(context.Background(), keys...)
	require.NoError(t, err)
	return g
}

// waitUntil polls cond; the bound is only a hang guard, far above need.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, time.Minute, 100*time.Microsecond)
}

func TestMutualExclusion(t *testing.T) {
	const workers, iters = 32, 200
	m := New(Options{})
	var inside atomic.Bool
	counter := 0    // protected only by the lock
	var last uint64 // token of the previous holder, protected by the lock
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range iters {
				g, err := m.Lock(context.Background(), 7)
				if !assert.NoError(t, err) {
					return
				}
				assert.True(t, inside.CompareAndSwap(false, true), "two holders at once")
				assert.Greater(t, g.Token(), last, "tokens must grow in grant order")
				last = g.Token()
				counter++
				inside.Store(false)
				g.Release()
			}
		})
	}
	wg.Wait()
	require.Equal(t, workers*iters, counter)
	require.Zero(t, m.Len())
}

func TestFIFO(t *testing.T) {
	const n = 10
	m := New(Options{})
	holder := mustLock(t, m, 1)
	order := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			g, err := m.Lock(context.Background(), 1)
			if assert.NoError(t, err) {
				order <- i // sent while holding, so channel order is grant order
				g.Release()
			}
		})
		waitUntil(t, func() bool { return m.Waiting(1) == i+1 })
	}
	holder.Release()
	wg.Wait()
	close(order)
	var got []int
	for i := range order {
		got = append(got, i)
	}
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	require.Equal(t, want, got)
	require.Zero(t, m.Len())
}

func TestTimeout(t *testing.T) {
	tests := []struct {
		name string
		held []uint64
		lock []uint64
	}{
		{"single key", []uint64{1}, []uint64{1}},
		{"first of two held", []uint64{1}, []uint64{1, 2}},
		{"second of two held", []uint64{2}, []uint64{1, 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := New(Options{Timeout: forcedTimeout})
			holder := mustLock(t, m, tc.held...)
			_, err := m.Lock(context.Background(), tc.lock...)
			require.ErrorIs(t, err, ErrTimeout)
			for _, k := range tc.lock {
				assert.Zero(t, m.Waiting(k), "key %d", k)
			}
			require.Equal(t, len(tc.held), m.Len(), "partially acquired keys must be freed")
			require.NoError(t, holder.Check())
			holder.Release()
			require.Zero(t, m.Len())
		})
	}
}

// The deadline covers the whole call: 6s on key 1 plus 6s on key 2 must
// fail at 10s, not succeed at 12s. synctest's fake clock makes it exact.
func TestTimeoutIsOneDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := New(Options{Timeout: 10 * time.Second})
		a, b := mustLock(t, m, 1), mustLock(t, m, 2)
		start := time.Now()
		res := lockAsync(context.Background(), m, 1, 2)
		time.AfterFunc(6*time.Second, a.Release)
		time.AfterFunc(12*time.Second, b.Release)
		r := <-res
		require.ErrorIs(t, r.err, ErrTimeout)
		require.Equal(t, 10*time.Second, time.Since(start))
		require.Equal(t, 1, m.Len(), "key 1, taken at 6s, must be freed again")
		time.Sleep(5 * time.Second)
		require.Zero(t, m.Len())
	})
}

// A waiter that gives up as the holder releases must either own the key
// or leave nothing behind. Outcomes vary by run; only their shape is fixed.
func TestTimeoutRacesRelease(t *testing.T) {
	m := New(Options{Timeout: 200 * time.Microsecond})
	var won, timedOut int
	for i := range 2000 {
		holder := mustLock(t, m, 1)
		rs := []<-chan result{
			lockAsync(context.Background(), m, 1),
			lockAsync(context.Background(), m, 0, 1),
		}
		time.Sleep(time.Duration(i%5) * 50 * time.Microsecond)
		holder.Release()
		for _, ch := range rs {
			r := <-ch
			if r.err != nil {
				require.ErrorIs(t, r.err, ErrTimeout)
				timedOut++
				continue
			}
			require.NoError(t, r.g.Check())
			r.g.Release()
			won++
		}
		require.Zero(t, m.Len(), "iteration %d leaked a key", i)
	}
	t.Logf("won %d, timed out %d", won, timedOut)
	// Free keys are taken without waiting, so the tiny timeout cannot bite.
	g, err := m.Lock(context.Background(), 1)
	require.NoError(t, err)
	g.Release()
	require.Zero(t, m.Len())
}

// White-box check of the tie rule in await: the mutex, not select's random
// choice, decides whether a waiter whose wait ended owns the key.
func TestGiveUpTie(t *testing.T) {
	for _, handedOff := range []bool{false, true} {
		name := map[bool]string{false: "still queued", true: "already handed off"}[handedOff]
		t.Run(name, func(t *testing.T) {
			m := New(Options{})
			holder := mustLock(t, m, 1)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			wt := &waiter{id: m.nextToken(), ch: make(chan struct{})}
			m.mu.Lock()
			m.keys[1].queue = append(m.keys[1].queue, wt)
			m.mu.Unlock()
			if handedOff {
				holder.Release()
			}
			err := m.await(&wait{parent: ctx}, 1, wt)
			require.Zero(t, m.Waiting(1))
			if handedOff {
				require.NoError(t, err)
				m.mu.Lock()
				require.True(t, m.holdsLocked(1, wt.id))
				m.releaseLocked([]uint64{1}, wt.id)
				m.mu.Unlock()
			} else {
				require.ErrorIs(t, err, errWaitDone)
				holder.Release()
			}
			require.Zero(t, m.Len())
		})
	}
}

func TestContextCancel(t *testing.T) {
	t.Run("done before call", func(t *testing.T) {
		m := New(Options{})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := m.Lock(ctx, 1)
		require.ErrorIs(t, err, context.Canceled)
		require.Zero(t, m.Len())
	})
	t.Run("canceled while waiting", func(t *testing.T) {
		tests := []struct {
			name string
			lock []uint64
		}{
			{"single key", []uint64{1}},
			{"after taking first key", []uint64{0, 1}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				m := New(Options{})
				holder := mustLock(t, m, 1)
				ctx, cancel := context.WithCancel(context.Background())
				res := lockAsync(ctx, m, tc.lock...)
				waitUntil(t, func() bool { return m.Waiting(1) == 1 })
				cancel()
				r := <-res
				require.ErrorIs(t, r.err, context.Canceled)
				require.Zero(t, m.Waiting(1))
				require.Equal(t, 1, m.Len())
				holder.Release()
				require.Zero(t, m.Len())
			})
		}
	})
	t.Run("caller deadline is not ErrTimeout", func(t *testing.T) {
		m := New(Options{Timeout: time.Hour})
		holder := mustLock(t, m, 1)
		ctx, cancel := context.WithTimeout(context.Background(), forcedTimeout)
		defer cancel()
		_, err := m.Lock(ctx, 1)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.NotErrorIs(t, err, ErrTimeout)
		holder.Release()
		require.Zero(t, m.Len())
	})
}

func TestTooManyWaiters(t *testing.T) {
	m := New(Options{MaxWaiters: 2})
	holder := mustLock(t, m, 1)
	r1 := lockAsync(context.Background(), m, 1)
	waitUntil(t, func() bool { return m.Waiting(1) == 1 })
	r2 := lockAsync(context.Background(), m, 1)
	waitUntil(t, func() bool { return m.Waiting(1) == 2 })

	// No timeout and a background ctx: returning at all proves "at once".
	_, err := m.Lock(context.Background(), 1)
	require.ErrorIs(t, err, ErrTooManyWaiters)
	_, err = m.Lock(context.Background(), 0, 1)
	require.ErrorIs(t, err, ErrTooManyWaiters)
	require.Equal(t, 1, m.Len(), "key 0 must not stay held")
	require.Equal(t, 2, m.Waiting(1))

	holder.Release()
	for _, ch := range []<-chan result{r1, r2} {
		r := <-ch
		require.NoError(t, r.err)
		r.g.Release()
	}
	require.Zero(t, m.Len())
}

// Random overlapping key sets in random order; a deadlock would surface as
// DeadlineExceeded from the test-wide context instead of hanging.
func TestMultiKeyNoDeadlock(t *testing.T) {
	const workers, iters, nkeys = 16, 300, 8
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	m := New(Options{})
	var inside [nkeys]atomic.Bool
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for range iters {
				keys := make([]uint64, 1+rng.IntN(4)) // may repeat keys
				for i := range keys {
					keys[i] = rng.Uint64N(nkeys)
				}
				g, err := m.Lock(ctx, keys...)
				if !assert.NoError(t, err) {
					return
				}
				for _, k := range g.keys {
					assert.True(t, inside[k].CompareAndSwap(false, true), "key %d held twice", k)
				}
				for _, k := range g.keys {
					inside[k].Store(false)
				}
				g.Release()
			}
		})
	}
	wg.Wait()
	require.Zero(t, m.Len())
}

func TestDuplicateKeys(t *testing.T) {
	m := New(Options{})
	keys := []uint64{3, 1, 3, 2}
	g := mustLock(t, m, keys...)
	require.Equal(t, []uint64{3, 1, 3, 2}, keys, "caller's slice must not be reordered")
	require.Equal(t, 3, m.Len())
	g.Release()
	require.Zero(t, m.Len())
}

func TestTokenMonotonic(t *testing.T) {
	t.Run("sequential", func(t *testing.T) {
		m := New(Options{})
		var last uint64
		for i := range 100 {
			g := mustLock(t, m, uint64(i%3), uint64(i%7))
			require.Greater(t, g.Token(), last)
			last = g.Token()
			g.Release()
		}
	})
	// Tokens follow grant order, not call order: the earlier multi-key
	// call finishes after b, so it must carry the larger token.
	t.Run("grant order", func(t *testing.T) {
		m := New(Options{})
		a := mustLock(t, m, 1)
		res := lockAsync(context.Background(), m, 1, 2)
		waitUntil(t, func() bool { return m.Waiting(1) == 1 })
		b := mustLock(t, m, 2)
		a.Release()
		waitUntil(t, func() bool { return m.Waiting(2) == 1 })
		b.Release()
		r := <-res
		require.NoError(t, r.err)
		require.Greater(t, r.g.Token(), b.Token())
		r.g.Release()
		require.Zero(t, m.Len())
	})
}

func TestBreak(t *testing.T) {
	t.Run("next waiter gets the key", func(t *testing.T) {
		m := New(Options{})
		g1 := mustLock(t, m, 5)
		res := lockAsync(context.Background(), m, 5)
		waitUntil(t, func() bool { return m.Waiting(5) == 1 })
		require.True(t, m.Break(5))
		r := <-res
		require.NoError(t, r.err)
		g2 := r.g
		require.ErrorIs(t, g1.Check(), ErrLost)
		require.NoError(t, g2.Check())

		g1.Release() // fenced: must not free g2's key
		require.NoError(t, g2.Check())
		require.Equal(t, 1, m.Len())
		ctx, cancel := context.WithTimeout(context.Background(), forcedTimeout)
		defer cancel()
		_, err := m.Lock(ctx, 5)
		require.ErrorIs(t, err, context.DeadlineExceeded, "key must still be held by g2")

		g2.Release()
		require.ErrorIs(t, g2.Check(), ErrLost)
		require.Zero(t, m.Len())
	})
	t.Run("no waiter frees the key", func(t *testing.T) {
		m := New(Options{})
		g1 := mustLock(t, m, 5)
		require.True(t, m.Break(5))
		require.Zero(t, m.Len())
		require.ErrorIs(t, g1.Check(), ErrLost)
		g2 := mustLock(t, m, 5)
		g1.Release()
		require.NoError(t, g2.Check())
		g2.Release()
		require.Zero(t, m.Len())
	})
	t.Run("one key of a multi-key grant", func(t *testing.T) {
		m := New(Options{})
		g := mustLock(t, m, 1, 2)
		require.True(t, m.Break(1))
		require.ErrorIs(t, g.Check(), ErrLost)
		g.Release() // still frees key 2
		require.Zero(t, m.Len())
	})
	t.Run("while Lock waits for a later key", func(t *testing.T) {
		m := New(Options{})
		a := mustLock(t, m, 2)
		res := lockAsync(context.Background(), m, 1, 2)
		waitUntil(t, func() bool { return m.Waiting(2) == 1 })
		require.True(t, m.Break(1))
		a.Release()
		r := <-res
		require.ErrorIs(t, r.err, ErrLost)
		require.Zero(t, m.Len())
	})
	t.Run("idle key", func(t *testing.T) {
		require.False(t, New(Options{}).Break(5))
	})
}

func TestReleaseIdempotent(t *testing.T) {
	m := New(Options{})
	g1 := mustLock(t, m, 1)
	require.NoError(t, g1.Check())
	g1.Release()
	require.ErrorIs(t, g1.Check(), ErrLost)
	g2 := mustLock(t, m, 1)
	g1.Release() // second release must not touch g2
	require.NoError(t, g2.Check())
	g2.Release()
	g2.Release()
	require.Zero(t, m.Len())
}

func TestMillionKeysNoLeak(t *testing.T) {
	m := New(Options{})
	ctx := context.Background()
	for k := range uint64(1_000_000) {
		g, err := m.Lock(ctx, k)
		if err != nil {
			t.Fatalf("key %d: %v", k, err)
		}
		g.Release()
	}
	require.Zero(t, m.Len())
}
