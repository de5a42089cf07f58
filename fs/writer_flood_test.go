package fs_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/journal"
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

// advParse returns the writer and iteration of b if it is one whole
// advVersion.
func advParse(b []byte) (w, i int, ok bool) {
	if !advWhole(b) {
		return 0, 0, false
	}
	fmt.Sscanf(string(b[:20]), "writer %02d iter %02d\n", &w, &i)
	return w, i, true
}

// TestAdvWriterFlood: 64 writers rewrite one file in a loop, with at most
// 4 commits allowed to wait for its lock (lock timeout 2 s). Asserted:
//   - every close either succeeds or fails with EAGAIN (wait queue full)
//     or ETIMEDOUT, nothing else;
//   - the closes that succeeded are exactly the commits counted
//     (Stats().Commits), the ones that failed exactly the rejections
//     (Stats().Rejected), none dropped (rejected/ is far from its bounds);
//   - rejected/ holds exactly one file per failed close, named after the
//     writer's uid, holding that close's whole version, and no other;
//   - readers only ever see whole versions, and only the initial one or
//     one whose close succeeded: never a rejected version;
//   - the final file (mount and backing) is whole and a version whose
//     close succeeded; staging is empty.
//
// How many closes fail, and with which errno, depends on the scheduling:
// it is logged, not asserted (lockwait_test.go asserts each errno on a
// lock held on purpose). The daemon's memory (this process: the mount is
// in-process) is logged.
func TestAdvWriterFlood(t *testing.T) {
	const writers, iters = 64, 4
	// Every version could be rejected: that must fit in rejected/ (the
	// default bounds, per uid and in all), else bytes would be dropped and
	// the one-file-per-failure check would not hold.
	// (A kept file costs its allocated blocks: twice its size is ample.)
	if int64(writers*iters*2*advVersionSize) > fs.DefaultRejectedUserMax {
		t.Fatalf("the flood (%d versions of %d bytes) could pass rejected_user_max (%d)", writers*iters, advVersionSize, fs.DefaultRejectedUserMax)
	}
	m := testfs.New(t, func(o *fs.Options) {
		o.MaxWaiters = 4
		o.LockTimeout = 2 * time.Second
		o.RejectedMax = fs.DefaultRejectedMax
		o.RejectedUserMax = fs.DefaultRejectedUserMax
	})
	p := m.Path("hot")
	must(t, os.WriteFile(p, advVersion(99, 0), 0o644))
	rssBefore := advVmRSS(t)
	before := m.Stats()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var ok, eagain, etimedout, other atomic.Int64
	// outcome[w][i]: the errno of that close (notClosed: not closed).
	const notClosed = syscall.Errno(1 << 20)
	var outcome [writers][iters]syscall.Errno
	for w := range outcome {
		for i := range outcome[w] {
			outcome[w][i] = notClosed
		}
	}
	var otherErrs, seen sync.Map
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
				err = f.Close()
				outcome[w][i] = advErrno(err)
				switch advErrno(err) {
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
				w, i, whole := advParse(b)
				if !whole {
					if torn.Add(1) == 1 {
						t.Errorf("a reader saw %d bytes that are not one whole version (head %q)", len(b), b[:min(len(b), 20)])
					}
					continue
				}
				seen.Store([2]int{w, i}, true)
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
	failed := eagain.Load() + etimedout.Load()

	// The counters agree with what the callers got.
	after := m.Stats()
	if d := after.Commits - before.Commits; d != ok.Load() {
		t.Errorf("Stats().Commits grew by %d; %d closes returned 0", d, ok.Load())
	}
	if d := after.Rejected - before.Rejected; d != failed {
		t.Errorf("Stats().Rejected grew by %d; %d closes failed with EAGAIN or ETIMEDOUT", d, failed)
	}
	if d := after.Dropped - before.Dropped; d != 0 {
		t.Errorf("Stats().Dropped grew by %d: rejected bytes were dropped although rejected/ is far from its bounds", d)
	}

	// rejected/ holds exactly the versions whose close failed, each once.
	committed := func(w, i int) bool { return w == 99 && i == 0 || w < writers && i < iters && outcome[w][i] == 0 }
	rdir := filepath.Join(m.Backing, fs.InternalDir, journal.RejectedDir)
	ents, err := os.ReadDir(rdir)
	must(t, err)
	if int64(len(ents)) != failed {
		t.Errorf("rejected/ holds %d files; %d closes failed", len(ents), failed)
	}
	prefix := fmt.Sprintf("u%d-", os.Geteuid())
	kept := map[[2]int]string{}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), prefix) {
			t.Errorf("rejected/%s: the name does not start with %q (the writer's uid)", e.Name(), prefix)
		}
		b, err := os.ReadFile(filepath.Join(rdir, e.Name()))
		must(t, err)
		w, i, whole := advParse(b)
		switch {
		case !whole:
			t.Errorf("rejected/%s: %d bytes that are not one whole version (head %q)", e.Name(), len(b), b[:min(len(b), 20)])
		case w >= writers || i >= iters || (outcome[w][i] != syscall.EAGAIN && outcome[w][i] != syscall.ETIMEDOUT):
			t.Errorf("rejected/%s holds writer %d iter %d, whose close did not fail with EAGAIN or ETIMEDOUT", e.Name(), w, i)
		case kept[[2]int{w, i}] != "":
			t.Errorf("rejected/%s and %s both hold writer %d iter %d", e.Name(), kept[[2]int{w, i}], w, i)
		default:
			kept[[2]int{w, i}] = e.Name()
		}
	}
	for w := range outcome {
		for i, e := range outcome[w] {
			if (e == syscall.EAGAIN || e == syscall.ETIMEDOUT) && kept[[2]int{w, i}] == "" {
				t.Errorf("writer %d iter %d: close failed with %v, but its bytes are not in rejected/", w, i, e)
			}
		}
	}

	// Readers never saw a version that was not committed.
	seen.Range(func(k, _ any) bool {
		v := k.([2]int)
		if !committed(v[0], v[1]) {
			t.Errorf("a reader saw writer %d iter %d, whose close failed (errno %d): a rejected version was published", v[0], v[1], outcome[v[0]][v[1]])
		}
		return true
	})

	for _, f := range []string{p, m.BackingPath("hot")} {
		b, err := os.ReadFile(f)
		w, i, whole := advParse(b)
		switch {
		case err != nil || !whole:
			t.Errorf("final %s is not one whole version: %d bytes, %v", f, len(b), err)
		case !committed(w, i):
			t.Errorf("final %s is writer %d iter %d, whose close failed: a rejected version was published", f, w, i)
		}
	}
	n, used := advStagingUsage(t, m.Backing, "staging")
	rn, rused := advStagingUsage(t, m.Backing, journal.RejectedDir)
	t.Logf("VmRSS before %s, after %s; staging: %d files %d bytes; rejected/: %d files %d bytes (kept for humans, never cleaned)",
		rssBefore, advVmRSS(t), n, used, rn, rused)
	if n != 0 {
		t.Errorf("staging holds %d files after every writer closed", n)
	}
}
