// Command loopback is go-fuse's example loopback file system with the
// kernel's entry and attribute timeouts as flags, for the tests of
// safefs over a BACKING that caches (a stand-in for NFS's clients):
//
//	loopback -ttl 1s MOUNTPOINT DIR
package main

import (
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

func main() {
	ttl := flag.Duration("ttl", time.Second, "entry and attribute timeout (0: the kernel asks every time)")
	flag.Parse()
	if flag.NArg() != 2 {
		log.Fatal("usage: loopback [-ttl D] MOUNTPOINT DIR")
	}
	root, err := fs.NewLoopbackRoot(flag.Arg(1))
	if err != nil {
		log.Fatal(err)
	}
	t := *ttl
	server, err := fs.Mount(flag.Arg(0), root, &fs.Options{AttrTimeout: &t, EntryTimeout: &t, NegativeTimeout: &t,
		NullPermissions: true,
		MountOptions:    fuse.MountOptions{AllowOther: true, Options: []string{"default_permissions"}, Name: "loopback", FsName: flag.Arg(1)}})
	if err != nil {
		log.Fatal(err)
	}
	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	go func() { <-c; _ = server.Unmount() }()
	server.Wait()
}
