package main

import (
	"os"
	"strconv"
	"strings"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// raiseNofile gives the daemon as many descriptors as it may have: it
// holds some for every file open through the mount, for every user. The
// hard limit is raised to fs.nr_open where the daemon may (root with
// CAP_SYS_RESOURCE), and the soft limit to the hard one.
func raiseNofile(log *zap.Logger) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		log.Warn("cannot read the descriptor limit", zap.Error(err))
		return
	}
	if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && n > lim.Max {
			if unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: n, Max: n}) == nil {
				lim = unix.Rlimit{Cur: n, Max: n}
			}
		}
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
			log.Warn("cannot raise the descriptor limit", zap.Error(err))
		}
	}
	log.Debug("descriptor limit", zap.Uint64("nofile", lim.Cur))
}
