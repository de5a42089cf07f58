package fs

import (
	"context"
	"errors"
	"os"
	"syscall"

	"go.uber.org/zap"

	"github.com/safefs/safefs/internal/loglimit"
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

// logPath shortens a path for a log line (loglimit.Path).
func logPath(p string) string { return loglimit.Path(p) }
