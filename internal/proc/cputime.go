package proc

import (
	"strconv"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times (100 on
// every Linux architecture Go supports).
const clockTicks = 100

// CPUTime is the user and system CPU time process pid has used, all its
// threads (utime and stime, fields 14 and 15 of /proc/<pid>/stat).
func CPUTime(pid uint32) (time.Duration, error) {
	b, err := readProcLine(pidPath(pid, "stat"))
	if err != nil {
		return 0, err
	}
	return cpuTimeOf(b)
}

func cpuTimeOf(stat []byte) (time.Duration, error) {
	var ticks int64
	for _, n := range []int{14, 15} {
		f, err := statLineField(stat, n)
		if err != nil {
			return 0, err
		}
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}
