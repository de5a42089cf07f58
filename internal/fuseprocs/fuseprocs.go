// Package fuseprocs gives go-fuse's readers processors of their own.
//
// go-fuse's readers wait for requests in read(2) on /dev/fuse, each
// holding one of the runtime's processors (Ps) while it waits: go-fuse
// (v2.12, fuse/server.go) starts up to GOMAXPROCS of them, at least 2
// and at most 16, plus one. With GOMAXPROCS at the CPU count, waiting
// readers hold every P, so whatever else must run (the handler of a
// request, a goroutine woken by an unlock) waits until the runtime's
// monitor thread takes a P back from a reader, which it polls for every
// 20 µs while it keeps finding such Ps: on this VM its wake-ups were a
// fifth of the daemon's CPU time (docs/design.md). So once the
// server exists, and its reader count is fixed, the runtime gets a P for
// each reader on top of the CPUs. Not when the operator set GOMAXPROCS.
package fuseprocs

import (
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

var (
	procsOnce sync.Once
	baseProcs int
)

// Spare raises GOMAXPROCS by go-fuse's reader count (call it after
// fuse.NewServer). A process that mounts again keeps the first raise.
func Spare() {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	procsOnce.Do(func() { baseProcs = runtime.GOMAXPROCS(0) })
	if want := baseProcs + fuseReaders(baseProcs) + 1; runtime.GOMAXPROCS(0) < want {
		runtime.GOMAXPROCS(want)
	}
}

// fuseReaders is go-fuse's limit of readers for GOMAXPROCS procs.
func fuseReaders(procs int) int {
	return min(max(procs, 2), 16)
}

// A reader that serves requests back to back never passes through the
// scheduler, so its P looks stuck to sysmon, which after 10 ms takes it
// as it would from a long system call (the reader waits in read(2) most
// of that time) and so goes back to polling every 20 µs. A yield now
// and then lets the scheduler see the readers run: the first request
// handled yieldEvery after the last yield, by whichever reader.
const yieldEvery = 500 * time.Microsecond

var lastYield atomic.Int64

// YieldNowAndThen yields the processor if no request has for
// yieldEvery; fs calls it as it takes a request.
func YieldNowAndThen() {
	if yieldDue(time.Now().UnixNano()) {
		runtime.Gosched()
	}
}

// yieldDue reports whether a request taken at now yields, and if so
// makes now the last yield.
func yieldDue(now int64) bool {
	l := lastYield.Load()
	return now-l >= int64(yieldEvery) && lastYield.CompareAndSwap(l, now)
}
