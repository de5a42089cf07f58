package main

import (
	"context"
	"fmt"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Two more FUSE anchors: go-fuse's example loopback with one mechanism
// safefs's contract needs, so that a row's gap to the loopback splits
// into what that mechanism costs any FUSE file system and what safefs
// adds (README, "What the FUSE anchors with safefs's mechanisms reach").
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

// isLoopback reports whether target name is served by go-fuse's loopback.
func isLoopback(name string) bool {
	switch name {
	case "loopback", byHandFUSETarget, directTarget, locksTarget:
		return true
	}
	return false
}

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
		// Every node direct, the root's too: a create is its parent's.
		rd := node.(*gofs.LoopbackNode).RootData
		rd.NewNode = func(rd *gofs.LoopbackRoot, _ *gofs.Inode, _ string, _ *syscall.Stat_t) gofs.InodeEmbedder {
			return &directNode{gofs.LoopbackNode{RootData: rd}}
		}
		rd.RootNode = rd.NewNode(rd, nil, "", nil)
		node = rd.RootNode
		opts.MaxWrite = maxDirectWrite
		opts.ExtraCapabilities = fuse.CAP_DIRECT_IO_ALLOW_MMAP // safefs's too: shared maps of direct files
	case locksTarget:
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

// directNode is a loopback node whose opens are all direct I/O.
type directNode struct{ gofs.LoopbackNode }

var (
	_ gofs.NodeOpener  = (*directNode)(nil)
	_ gofs.NodeCreater = (*directNode)(nil)
)

func (n *directNode) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	return fh, fl | fuse.FOPEN_DIRECT_IO, errno
}

func (n *directNode) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	in, fh, fl, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	return in, fh, fl | fuse.FOPEN_DIRECT_IO, errno
}
