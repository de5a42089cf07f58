package fs

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The kernel retries an open answered ESTALE once and fails it if the
// retry is answered ESTALE too. A writer sent on from a node that
// readers cache, whose retry comes late (a loaded machine: CI saw it
// under a flood of writers) to a node another reader has cached
// meanwhile, must be let through, not fail with "stale file handle".
func TestRefusedOpenRetryPasses(t *testing.T) {
	srv, backing, mnt := mountForTest(t)
	if !srv.r.opts.VersionCache {
		t.Skip("writers are sent on only with cache=version")
	}
	p := filepath.Join(mnt, "page")
	// Written beside the mount: no writer made its node direct.
	require.NoError(t, os.WriteFile(filepath.Join(backing, "page"), []byte("v1\n"), 0o644))
	r1, err := os.Open(p) // reads through the page cache: a writer is sent on
	require.NoError(t, err)
	defer r1.Close()

	var fired atomic.Bool
	r2 := make(chan *os.File, 1) // the reader opened by the hook
	at := func(point string) {
		if point == "open-refused" && fired.CompareAndSwap(false, true) {
			// The retry comes after its route has lapsed, and a
			// reader caches the node it will come to.
			time.Sleep(retryWindow + 100*time.Millisecond)
			f, err := os.Open(p)
			assert.NoError(t, err, "a reader during the writer's refusal")
			r2 <- f
		}
	}
	srv.r.atPoint.Store(&at)
	w, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	srv.r.atPoint.Store(nil)
	if fired.Load() {
		if f := <-r2; f != nil {
			defer f.Close()
		}
	}
	if err == nil {
		_, werr := w.WriteString("v2\n")
		assert.NoError(t, werr)
		require.NoError(t, w.Close()) // before any return: this process serves the mount
	}
	require.True(t, fired.Load(), "the writer was not sent on")
	require.NoError(t, err, "the writer's retry")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, "v2\n", string(b))
}
