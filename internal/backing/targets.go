package backing

import (
	"context"
	"errors"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/proc"
)

// Targets opens journal targets for recovery, beneath the directory
// Root (BACKING's fd) only.
type Targets struct{ Root int }

// OpenTarget opens rel for recovery. Recovery runs before the mount
// serves: another process's lease on the target is waited for as long as
// the kernel lets its holder keep it (lease-break-time), since a commit
// cut off by a crash is to be settled (lease.go).
func (t Targets) OpenTarget(rel string) (*os.File, error) {
	w := LeaseWaiter{Limit: proc.LeaseBreakTime() + time.Second}
	for {
		f, err := t.openTarget(rel)
		if !errors.Is(err, ErrLeased) || !w.Again(context.Background()) {
			return f, err
		}
	}
}

func (t Targets) openTarget(rel string) (*os.File, error) {
	dir, nm := path.Split(rel)
	if dir == "" {
		return OpenRegular(t.Root, nm, unix.O_RDWR)
	}
	dfd, err := OpenRel(t.Root, strings.TrimSuffix(dir, "/"), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	return OpenRegular(dfd, nm, unix.O_RDWR)
}
