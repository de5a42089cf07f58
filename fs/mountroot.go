package fs

import (
	"context"
	"os"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/mountroot"
)

// The kernel makes a FUSE mount's root inode before the daemon's INIT
// reply turns ACL support on, and marks it never to cache its ACL: every
// path walk through the mount by a user who does not own BACKING's top
// (the web server) asks the daemon for the root's ACL, and leaves the
// kernel's lock-free walk. So where it can, safefs mounts a small
// directory as the FUSE root, with BACKING's top as its one entry, and
// puts a bind mount of that entry on the mount point in its place: the
// top is then an inode like any other, made after INIT (design section,
// "The mount's root").

// topName is the top's name in the hidden root: the mount table shows
// it as the mount's root ("/backing").
const topName = "backing"

// hiddenRootIno is the hidden root's inode number. go-fuse tells nodes
// apart by number and generation, and every file but the top (number 1)
// has a generation above 0: no node shares the hidden root's.
const hiddenRootIno = ^uint64(0) - 1

// hiddenRoot is the FUSE root of a swapped mount; only the daemon itself
// walks through it, once, to reach the top.
type hiddenRoot struct {
	gofs.Inode
	top *Node
}

var _ gofs.NodeOnAdder = (*hiddenRoot)(nil)
var _ gofs.NodeGetattrer = (*hiddenRoot)(nil)

func (h *hiddenRoot) OnAdd(ctx context.Context) {
	top := h.NewPersistentInode(ctx, h.top, h.top.f.identity())
	h.AddChild(topName, top, false)
}

func (h *hiddenRoot) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = unix.S_IFDIR | 0o500
	out.Nlink = 3
	out.Ino = hiddenRootIno
	return 0
}

// canSwapRoot reports whether the mount's root can be swapped for a bind
// mount of the top: a daemon with CAP_SYS_ADMIN on Linux 5.2+ (the new
// mount API).
func canSwapRoot(mountpoint string) bool {
	if os.Geteuid() != 0 || noSwapRoot {
		return false
	}
	return mountroot.CanSwap(mountpoint)
}

// noSwapRoot keeps the kernel's root inode as the top (tests of the
// fallback).
var noSwapRoot = false

// swapRoot is swapMount; tests make it fail.
var swapRoot = swapMount

// swapMount replaces the FUSE mount on mountpoint by a bind mount of its
// entry topName.
func swapMount(mountpoint string) error { return mountroot.Swap(mountpoint, topName) }
