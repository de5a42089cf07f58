package proc

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// LeaseHolder is a process /proc/locks shows holding a lease on a file.
type LeaseHolder struct {
	Pid   int    `json:"pid"`
	UID   int    `json:"uid"` // -1 if unknown
	Comm  string `json:"comm"`
	State string `json:"state"` // ACTIVE, BREAKING
}

// LeaseHolders lists the holders of leases on the inode ino of device
// dev, as
// /proc/locks tells them ("1: LEASE  BREAKING  READ 469 fe:00:9982265 0
// EOF": the device as major:minor in hex, then the inode number).
func LeaseHolders(dev, ino uint64) []LeaseHolder {
	b, err := readProc("/proc/locks")
	if err != nil {
		return nil
	}
	file := fmt.Sprintf("%02x:%02x:%d", unix.Major(dev), unix.Minor(dev), ino)
	var out []LeaseHolder
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || f[1] != "LEASE" || f[5] != file {
			continue
		}
		pid, err := strconv.Atoi(f[4])
		if err != nil {
			continue
		}
		h := LeaseHolder{Pid: pid, UID: -1, State: f[2]}
		if c, err := readProc("/proc/" + f[4] + "/comm"); err == nil {
			h.Comm = strings.TrimSpace(string(c))
		}
		if fi, err := os.Stat("/proc/" + f[4]); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				h.UID = int(st.Uid)
			}
		}
		out = append(out, h)
	}
	return out
}

// LeaseBreakTime is the kernel's lease-break-time: after it, a lease
// whose holder did not give it up is taken back.
func LeaseBreakTime() time.Duration {
	b, err := readProc("/proc/sys/fs/lease-break-time")
	if err != nil {
		return 45 * time.Second
	}
	s, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || s < 0 {
		return 45 * time.Second
	}
	return time.Duration(s) * time.Second
}
