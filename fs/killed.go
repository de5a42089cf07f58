package fs

import (
	"bytes"
	"os"
	"strconv"
	"time"
)

// Linux task flags (include/linux/sched.h).
const (
	pfExiting  = 0x4
	pfSignaled = 0x400
)

// taskFlags reads field 9 of /proc/<pid>/stat.
func taskFlags(pid uint32) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/stat")
	if err != nil {
		return 0, err
	}
	// comm (field 2) may hold spaces and parens: count from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, os.ErrInvalid
	}
	fields := bytes.Fields(b[i+1:])
	if len(fields) < 7 {
		return 0, os.ErrInvalid
	}
	return strconv.ParseUint(string(fields[6]), 10, 64)
}

// killedBySignal reports whether pid is exiting because a signal killed
// it. A dying process still flushes its descriptors; its writes must not
// commit. pid 0 (another pid namespace) cannot be checked.
func killedBySignal(pid uint32) bool {
	if pid == 0 {
		return false
	}
	// Reading /proc/<pid>/stat blocks while pid is in execve, and execve
	// waits for this very FLUSH (it closes inherited descriptors): bound
	// the wait. A process in execve is not dying.
	ch := make(chan uint64, 1)
	go func() {
		fl, _ := taskFlags(pid)
		ch <- fl
	}()
	select {
	case fl := <-ch:
		return fl&pfExiting != 0 && fl&pfSignaled != 0
	case <-time.After(100 * time.Millisecond):
		return false
	}
}
