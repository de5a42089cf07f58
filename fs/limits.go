package fs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// The daemon spends its own descriptors and disk on behalf of callers
// who may not have them: one user must not exhaust them for everyone.

// spaceReserve is kept free beyond what unprivileged users may use, so
// the journal can always finish the commits in progress.
const spaceReserve = 1 << 20

// takeFile reserves a handle for the caller of ctx; the handle made with
// it gives it back at release.
func (r *root) takeFile(ctx context.Context) error {
	err := r.files.Take(callerUID(ctx))
	if err != nil {
		r.count.tooManyFiles.Add(1)
	}
	return err
}

// callerTid is the thread a request came from (0 if unknown).
func callerTid(ctx context.Context) uint32 {
	if c, ok := fuse.FromContext(ctx); ok {
		return c.Pid &^ noFh
	}
	return 0
}

func callerUID(ctx context.Context) uint32 {
	if c, ok := fuse.FromContext(ctx); ok {
		return c.Uid
	}
	return 0
}

// roomFor refuses (ENOSPC) n more bytes for a non-root user beyond what
// the file system gives unprivileged users (statfs f_bavail): the
// daemon writes as root, and would otherwise eat root's reserved blocks.
func (r *root) roomFor(uid uint32, n int64) error {
	if uid == 0 || n <= 0 || r.space.Take(n) {
		return nil
	}
	var s unix.Statfs_t
	if err := unix.Fstatfs(r.rootfd, &s); err != nil {
		return err
	}
	left := int64(s.Bavail)*s.Bsize - spaceReserve
	if n > left {
		r.count.noSpace.Add(1)
		return syscall.ENOSPC
	}
	r.space.Set(left-n, s.Bsize)
	return nil
}

// metaCost is what roomForMeta counts for a change of metadata: a block
// of the largest usual size (a new directory's first block, a directory
// grown by one, a long symlink's target, an xattr block).
const metaCost = 4 << 10

// roomForMeta refuses (ENOSPC) a non-root caller a change of metadata
// that may take a block, plus n bytes of its own (a symlink's target, an
// xattr), at the bound of its data writes: the daemon makes entries and
// sets xattrs as root, and would otherwise fill root's reserved blocks
// with directories or xattrs once data writes were refused. Rename too:
// a rename into a full directory block takes a new one.
func (r *root) roomForMeta(ctx context.Context, n int) error {
	return r.roomFor(callerUID(ctx), metaCost+int64(n))
}
