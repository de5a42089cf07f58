package main

import (
	"errors"
	"fmt"
)

// Exit codes of safefs. Scripts and service managers act on them, so they
// are part of the interface: never renumber, only add.
const (
	exitOK       = 0  // success
	exitInternal = 1  // unexpected internal error
	exitUsage    = 2  // wrong argument count, unknown command or flag, bad -o option
	exitBadDirs  = 3  // BACKING or MOUNTPOINT missing, not a directory, the same, or one inside the other
	exitMounted  = 4  // MOUNTPOINT is already a mount point (including a stale, disconnected FUSE mount)
	exitNoFuse   = 5  // no FUSE device (/dev/fuse), or not root and no fusermount3
	exitBusy     = 6  // BACKING is already served by another safefs
	exitMount    = 7  // mount failed for another reason
	exitRecover  = 8  // `safefs recover` failed
	exitMetrics  = 9  // -o metrics=ADDR cannot be listened on (in use, bad address)
	exitAudit    = 10 // -o audit=FILE cannot be opened
	// `safefs status`: no daemon's socket at the directory given.
	exitNotSafefs = 11
	// `safefs status`: the socket refused us (not root).
	exitStatusDenied = 12
	// cluster=etcd: etcd cannot be reached at mount; nothing is mounted.
	exitCluster = 13
	// cluster=etcd: etcd answered but refused this daemon's user or
	// password, or its use of /safefs/NAME/; nothing is mounted.
	exitClusterRefused = 14
)

// exitCodeHelp is the table printed by `safefs --help`.
var exitCodeHelp = []struct {
	code    int
	meaning string
}{
	{exitOK, "success"},
	{exitInternal, "unexpected internal error"},
	{exitUsage, "usage error: arguments, command or -o option"},
	{exitBadDirs, "BACKING or MOUNTPOINT missing, not a directory, or nested"},
	{exitMounted, "MOUNTPOINT is already a mount point (or a stale FUSE mount)"},
	{exitNoFuse, "no /dev/fuse (or, not root, no fusermount3: install fuse3)"},
	{exitBusy, "BACKING is already served by another safefs"},
	{exitMount, "mount failed"},
	{exitRecover, "recover failed"},
	{exitMetrics, "metrics address cannot be listened on (in use?)"},
	{exitAudit, "audit file cannot be opened"},
	{exitNotSafefs, "status: not a safefs mount or BACKING (no daemon answers)"},
	{exitStatusDenied, "status: permission denied (root only)"},
	{exitCluster, "cluster=etcd: etcd cannot be reached; nothing is mounted"},
	{exitClusterRefused, "cluster=etcd: etcd refused the user or password; nothing is mounted"},
}

// exitError is an error that run reports with a specific exit code.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func failf(code int, format string, args ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

// exitCode maps an error to the exit code; errors nobody classified are
// internal errors.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var e *exitError
	if errors.As(err, &e) {
		return e.code
	}
	return exitInternal
}
