package main

import (
	"context"
	"fmt"
	"slices"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Two more FUSE anchors: go-fuse's example loopback with one mechanism
// safefs's contract needs, so that a row's gap to the loopback splits
// into what that mechanism costs any FUSE file system and what safefs
// adds (docs/benchmarks.md, targets).
const (
	// directTarget serves every open with direct I/O and 1 MiB writes,
	// as safefs serves writers: their pending bytes must never enter a
	// page cache that others read.
	directTarget = "loopback-direct"
	// locksTarget decides flock and fcntl locks in the daemon (its
	// flock(2) and OFD locks on its own descriptors), as safefs does so
	// that a script's lock holds across commits.
	locksTarget = "loopback-locks"
)

// loopbackTargets are the targets go-fuse's loopback serves, in table order.
var loopbackTargets = []string{"loopback", byHandFUSETarget, directTarget, locksTarget}

// isLoopback reports whether target name is served by go-fuse's loopback.
func isLoopback(name string) bool { return slices.Contains(loopbackTargets, name) }

// mountLoopback mounts go-fuse's loopback as its example program does,
// with the one change target name makes.
func mountLoopback(name, raw, dir string) (func() error, error) {
	node, err := gofs.NewLoopbackRoot(raw)
	if err != nil {
		return nil, err
	}
	opts := loopbackOptions(raw)
	switch name {
	case directTarget:
		node = serveWith(node, directOpen)
		opts.MaxWrite = maxDirectWrite
		opts.ExtraCapabilities = fuse.CAP_DIRECT_IO_ALLOW_MMAP // safefs's too: shared maps of direct files
	case locksTarget:
		node = serveWith(node, lockingOpen)
		opts.EnableLocks = true
	}
	srv, err := gofs.Mount(dir, node, opts)
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", name, err)
	}
	return func() error {
		if err := srv.Unmount(); err != nil {
			return err
		}
		srv.Wait()
		return nil
	}, nil
}

// maxDirectWrite is safefs's WRITE size (fs/maxwrite.go, without -race).
const maxDirectWrite = 1 << 20

// serveWith makes every node of the loopback rooted at node one whose
// opens and creates are changed by change, the root's too (a create is
// its parent's), and returns the new root.
func serveWith(node gofs.InodeEmbedder, change openChange) gofs.InodeEmbedder {
	rd := node.(*gofs.LoopbackNode).RootData
	rd.NewNode = func(rd *gofs.LoopbackRoot, _ *gofs.Inode, _ string, _ *syscall.Stat_t) gofs.InodeEmbedder {
		return &changedNode{LoopbackNode: gofs.LoopbackNode{RootData: rd}, change: change}
	}
	rd.RootNode = rd.NewNode(rd, nil, "", nil)
	return rd.RootNode
}

// openChange changes what an open or create of the loopback returns.
type openChange func(gofs.FileHandle, uint32) (gofs.FileHandle, uint32)

// directOpen serves the open with direct I/O.
func directOpen(fh gofs.FileHandle, flags uint32) (gofs.FileHandle, uint32) {
	return fh, flags | fuse.FOPEN_DIRECT_IO
}

// lockingOpen hides the file's descriptor from go-fuse's passthrough.
// With it, go-fuse v2.12.1 gives an inode's later opens the backing file
// of its first, so a flock taken through the first stays held after its
// release while another open is alive, and a counter's next flock waits
// for ever (one Perl process hung after 37 commits).
func lockingOpen(fh gofs.FileHandle, flags uint32) (gofs.FileHandle, uint32) {
	if lf, ok := fh.(loopbackFile); ok {
		return lockFile{lf}, flags
	}
	return fh, flags
}

// loopbackFile is what go-fuse's LoopbackFile serves, but passthrough.
type loopbackFile interface {
	gofs.FileReader
	gofs.FileWriter
	gofs.FileFlusher
	gofs.FileFsyncer
	gofs.FileReleaser
	gofs.FileGetattrer
	gofs.FileSetattrer
	gofs.FileLseeker
	gofs.FileAllocater
	gofs.FileGetlker
	gofs.FileSetlker
	gofs.FileSetlkwer
}

// lockFile is a LoopbackFile without PassthroughFd.
type lockFile struct{ loopbackFile }

// changedNode is a loopback node whose opens and creates change makes.
type changedNode struct {
	gofs.LoopbackNode
	change openChange
}

var (
	_ gofs.NodeOpener  = (*changedNode)(nil)
	_ gofs.NodeCreater = (*changedNode)(nil)
	_ loopbackFile     = (*gofs.LoopbackFile)(nil)
)

func (n *changedNode) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	fh, fl = n.change(fh, fl)
	return fh, fl, errno
}

func (n *changedNode) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	in, fh, fl, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	fh, fl = n.change(fh, fl)
	return in, fh, fl, errno
}
