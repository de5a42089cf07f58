package fs

import (
	"context"
	"os"
	"sync"
	"sync/atomic"

	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
	"github.com/safefs/safefs/internal/fuseprocs"
	"github.com/safefs/safefs/internal/magic"
)

// Passthrough (Options.Passthrough): a read-only open may be
// served by the kernel from its own version's backing file
// (FOPEN_PASSTHROUGH), so its reads and maps never reach the daemon.
// What the kernel allows (fs/fuse/iomode.c, file.c, 6.18):
//   - one backing file per kernel inode while any passthrough file of it
//     is open; another backing fails the open (EBUSY);
//   - while the inode has a backing file, an open without
//     FOPEN_PASSTHROUGH fails (EIO), and a direct-I/O file's mmap fails;
//   - the first passthrough open fails (ETXTBSY) while a direct-I/O file
//     of the inode has a shared map (cached I/O mode).
//
// So the first passthrough open of a file is given only to a reader that
// is alone on it (no other handle open: the daemon hears RELEASE after
// the kernel dropped the file, so it never thinks a file gone that the
// kernel still has), of a regular file with one link (others commit in
// place), not a gdbm database, and not marked ptFile.never. While any passthrough file of it is open, every
// open of it gets the same backing: a reader of that very version reads
// it directly; any other open (a writer, a reader of another version)
// also gets FOPEN_DIRECT_IO, so its read and write still come to the
// daemon, but its maps are the backing version's (see docs/threat-model.md).
// go-fuse's own backing management (FilePassthroughFder) reuses the
// first backing for every later open and lets non-passthrough releases
// drop its count; so safefs registers and counts backing files itself,
// and rawFS puts the ID in the OPEN reply.

// ptRoot is the mount's passthrough state.
type ptRoot struct {
	srv  atomic.Pointer[fuse.Server]
	off  atomic.Bool // registration failed once: no more tries
	once sync.Once
	// ids: the backing ID an open being answered carries, by its
	// request's cancel channel (unique among requests in flight).
	ids sync.Map
}

// ptFile is a file's passthrough state, under f.mu.
type ptFile struct {
	id   int32 // registered backing ID, 0: none
	key  key   // the version id serves
	open int   // handles opened with id, not yet released
	// never: start no more passthrough for f. A direct-I/O handle had a
	// shared map, or an open had to share a reader's backing file (a
	// writer, or a reader of a newer version: its maps would be the
	// older version's), so f is mapped or rewritten while read.
	never bool
}

// ptOpen decides how h, just opened, is served, and returns the open
// flags. h is in f.handles already.
func (n *Node) ptOpen(ctx context.Context, h *handle) uint32 {
	r := n.r
	if !r.opts.Passthrough || r.pt.off.Load() || n.f.kind != unix.S_IFREG || h.private {
		return fuse.FOPEN_DIRECT_IO
	}
	cancel, ok := replyOf(ctx)
	if !ok {
		return fuse.FOPEN_DIRECT_IO
	}
	st, err := backing.Fstat(int(h.first.Fd()))
	if err != nil {
		return fuse.FOPEN_DIRECT_IO
	}
	f := n.f
	f.mu.Lock()
	defer f.mu.Unlock()
	mine := !h.write && st.Nlink == 1 && h.first == h.base
	if f.pt.open == 0 {
		if !mine || f.pt.never || len(f.handles) != 1 || magic.GDBM(h.first) || !r.ptRegister(f, h, keyOf(&st)) {
			return fuse.FOPEN_DIRECT_IO
		}
	}
	f.pt.open++
	h.pt = true
	r.pt.ids.Store(cancel, f.pt.id)
	if mine && keyOf(&st) == f.pt.key {
		r.count.passthrough.Add(1)
		return 0
	}
	f.pt.never = true
	r.count.passthroughDirect.Add(1)
	return fuse.FOPEN_DIRECT_IO
}

// ptRegister registers h's version as f's backing file (f.mu is held).
func (r *root) ptRegister(f *file, h *handle, k key) bool {
	id, ok := r.ptBacking(h.first)
	if ok {
		f.pt.id, f.pt.key = id, k
	}
	return ok
}

// ptBacking registers fd's file as a backing file.
func (r *root) ptBacking(fd *os.File) (int32, bool) {
	srv := r.pt.srv.Load()
	if srv == nil {
		return 0, false
	}
	id, errno := srv.RegisterBackingFd(&fuse.BackingMap{Fd: int32(fd.Fd())})
	if errno != 0 {
		r.pt.off.Store(true)
		r.pt.once.Do(func() {
			// On by default: unprivileged mounts land here.
			r.log.Info("passthrough unavailable (needs CAP_SYS_ADMIN and kernel 6.9+): readers read through the daemon",
				zap.Error(errno))
		})
		return 0, false
	}
	return id, true
}

// ptRelease drops h's count; the last one unregisters the backing file
// (the kernel keeps it while a file of the inode still uses it).
func (h *handle) ptRelease() {
	if !h.pt {
		return
	}
	h.pt = false
	f, r := h.n.f, h.n.r
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pt.open--; f.pt.open > 0 {
		return
	}
	r.ptUnregister(f.pt.id)
	f.pt.id, f.pt.key = 0, key{}
}

func (r *root) ptUnregister(id int32) {
	if srv := r.pt.srv.Load(); srv != nil {
		if errno := srv.UnregisterBackingFd(id); errno != 0 {
			r.log.Warn("unregister backing file", zap.Error(errno))
		}
	}
}

// ptMapped records that a direct-I/O handle of f has a shared map: such
// files (gdbm and the like) are not started in passthrough again, where
// a writer's map would be the reader's version.
func (f *file) ptMapped() {
	f.mu.Lock()
	f.pt.never = true
	f.mu.Unlock()
}

// ptReply puts the backing ID decided by ptOpen in the OPEN reply.
func (p *ptRoot) ptReply(cancel <-chan struct{}, out *fuse.OpenOut) {
	if p == nil {
		return
	}
	if v, ok := p.ids.LoadAndDelete(cancel); ok {
		out.BackingID = v.(int32)
		out.OpenFlags |= fuse.FOPEN_PASSTHROUGH
	}
}

func (w rawFS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	fuseprocs.YieldNowAndThen()
	st := w.RawFileSystem.Open(cancel, in, out)
	w.pt.ptReply(cancel, out)
	return st
}
