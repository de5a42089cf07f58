package fs

import (
	"os"
	"runtime"
	"sync"
)

// go-fuse's readers wait for requests in read(2) on /dev/fuse, each
// holding one of the runtime's processors (Ps) while it waits: go-fuse
// (v2.12, fuse/server.go) starts up to GOMAXPROCS of them, at least 2
// and at most 16, plus one. With GOMAXPROCS at the CPU count, waiting
// readers hold every P, so whatever else must run (the handler of a
// request, a goroutine woken by an unlock) waits until the runtime's
// monitor thread takes a P back from a reader, which it polls for every
// 20 µs while it keeps finding such Ps: on this VM its wake-ups were a
// fifth of the daemon's CPU time (README, design section). So once the
// server exists, and its reader count is fixed, the runtime gets a P for
// each reader on top of the CPUs. Not when the operator set GOMAXPROCS.

var (
	procsOnce sync.Once
	baseProcs int
)

// spareProcs raises GOMAXPROCS by go-fuse's reader count (call it after
// fuse.NewServer). A process that mounts again keeps the first raise.
func spareProcs() {
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
