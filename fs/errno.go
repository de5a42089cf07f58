package fs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"

	"go.uber.org/zap"
)

// toErrno is the one mapping from errors to the errno a caller sees. It
// unwraps wrapped errors (go-fuse's ToErrno does not); anything without
// an errno is unexpected: it is logged with the path and becomes EIO.
func toErrno(log *zap.Logger, path string, err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	switch {
	case errors.Is(err, os.ErrNotExist):
		return syscall.ENOENT
	case errors.Is(err, os.ErrExist):
		return syscall.EEXIST
	case errors.Is(err, os.ErrPermission):
		return syscall.EACCES
	case errors.Is(err, context.DeadlineExceeded):
		return syscall.ETIMEDOUT
	}
	log.Error("unexpected error", zap.String("path", path), zap.Error(err))
	return syscall.EIO
}

// logPath shortens a path for a log line: a path may be 64 KiB long, and
// a flood of failures on it must not flood the log.
func logPath(p string) string {
	const head, tail = 64, 192
	if len(p) <= head+tail+32 {
		return p
	}
	return p[:head] + fmt.Sprintf("...(%d bytes)...", len(p)) + p[len(p)-tail:]
}
