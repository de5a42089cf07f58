package fs_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/testfs"
)

const advVersionSize = 64 << 10

// advVersion is one whole version of the flooded file: a header naming
// writer and iteration, then one byte repeated to a fixed size.
func advVersion(w, i int) []byte {
	h := fmt.Sprintf("writer %02d iter %02d\n", w, i)
	return append([]byte(h), bytes.Repeat([]byte{byte('A' + w%26)}, advVersionSize-len(h))...)
}

// advWhole reports whether b is exactly one advVersion.
func advWhole(b []byte) bool {
	var w, i int
	if len(b) != advVersionSize {
		return false
	}
	if _, err := fmt.Sscanf(string(b[:20]), "writer %02d iter %02d\n", &w, &i); err != nil {
		return false
	}
	return bytes.Equal(b, advVersion(w, i))
}

func advVmRSS(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return err.Error()
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			return strings.TrimSpace(strings.TrimPrefix(l, "VmRSS:"))
		}
	}
	return "?"
}

// TestAdvWriterFlood: 64 writers rewrite one file in a loop, with at most
// 4 commits allowed to wait for its lock (lock timeout 2 s). Every close
// either succeeds or fails with EAGAIN (wait queue full) or ETIMEDOUT;
// readers and the final state always see one whole version. The
// daemon's memory (this process: the mount is in-process) is logged.
func TestAdvWriterFlood(t *testing.T) {
	m := testfs.New(t, func(o *fs.Options) {
		o.MaxWaiters = 4
		o.LockTimeout = 2 * time.Second
	})
	p := m.Path("hot")
	must(t, os.WriteFile(p, advVersion(99, 0), 0o644))
	rssBefore := advVmRSS(t)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const writers, iters = 64, 4
	var ok, eagain, etimedout, other atomic.Int64
	var otherErrs sync.Map
	var stop atomic.Bool
	var wg, rg sync.WaitGroup
	start := make(chan struct{})
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := 0; i < iters && ctx.Err() == nil; i++ {
				f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
				if err != nil {
					other.Add(1)
					otherErrs.Store("open: "+err.Error(), true)
					continue
				}
				if _, err := f.Write(advVersion(w, i)); err != nil {
					otherErrs.Store("write: "+err.Error(), true)
				}
				switch err := f.Close(); advErrno(err) {
				case 0:
					ok.Add(1)
				case syscall.EAGAIN:
					eagain.Add(1)
				case syscall.ETIMEDOUT:
					etimedout.Add(1)
				default:
					other.Add(1)
					otherErrs.Store("close: "+err.Error(), true)
				}
			}
		}()
	}
	var reads, torn atomic.Int64
	for r := 0; r < 2; r++ {
		rg.Add(1)
		go func() {
			defer rg.Done()
			for !stop.Load() && ctx.Err() == nil {
				b, err := os.ReadFile(p)
				if err != nil {
					otherErrs.Store("read: "+err.Error(), true)
					continue
				}
				reads.Add(1)
				if !advWhole(b) {
					if torn.Add(1) == 1 {
						t.Errorf("a reader saw %d bytes that are not one whole version (head %q)", len(b), b[:min(len(b), 20)])
					}
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	stop.Store(true)
	rg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the flood did not end within the deadline")
	}
	t.Logf("closes: %d ok, %d EAGAIN, %d ETIMEDOUT, %d other; %d reads, %d torn", ok.Load(), eagain.Load(), etimedout.Load(), other.Load(), reads.Load(), torn.Load())
	otherErrs.Range(func(k, _ any) bool {
		t.Errorf("unexpected: %v", k)
		return true
	})
	if ok.Load() == 0 {
		t.Errorf("no writer ever committed")
	}
	b, err := os.ReadFile(p)
	if err != nil || !advWhole(b) {
		t.Errorf("final file is not one whole version: %d bytes, %v", len(b), err)
	}
	bb, err := os.ReadFile(m.BackingPath("hot"))
	if err != nil || !advWhole(bb) {
		t.Errorf("final backing file is not one whole version: %d bytes, %v", len(bb), err)
	}
	n, used := advStagingUsage(t, m.Backing, "staging")
	rn, rused := advStagingUsage(t, m.Backing, "rejected")
	t.Logf("VmRSS before %s, after %s; staging: %d files %d bytes; rejected/: %d files %d bytes (kept for humans, never cleaned)",
		rssBefore, advVmRSS(t), n, used, rn, rused)
	if n != 0 {
		t.Errorf("staging holds %d files after every writer closed", n)
	}
	if int64(rn) != eagain.Load()+etimedout.Load() {
		t.Logf("note: %d rejected commits, %d files in rejected/", eagain.Load()+etimedout.Load(), rn)
	}
}
