package fs_test

import (
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"

	"github.com/safefs/safefs/fs"
)

// Mount serves BACKING on a mount point until a signal asks to stop:
// every write through /var/www/data is then atomic and serialized. (It
// needs root or fusermount3, and /dev/fuse: not run as a test.)
func ExampleMount() {
	o := fs.DefaultOptions()
	o.AllowOther = true // the web server's user writes through the mount
	o.Log, _ = zap.NewProduction()
	srv, err := fs.Mount("/srv/data", "/var/www/data", o)
	if err != nil {
		log.Fatal(err) // fs.ErrBusy: another safefs serves /srv/data
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
	<-stop
	// Unmount commits what files still open have pending, then releases
	// BACKING for the next mount.
	if err := srv.Unmount(); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d commits\n", srv.Stats().Commits)
}

// Recover settles the commits a crash cut off, without mounting (Mount
// does it too, before it serves).
func ExampleRecover() {
	sum, err := fs.Recover("/srv/data", fs.DefaultOptions())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("completed %d, rolled back %d, orphans removed %d\n", sum.Completed, sum.RolledBack, sum.Orphans)
}

// Status and Gauges read a live mount without waiting for any request:
// who holds which file's commit lock, who waits, and what is pending.
func ExampleServer_Status() {
	srv, err := fs.Mount("/srv/data", "/var/www/data", fs.DefaultOptions())
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Unmount()
	for _, l := range srv.Status().Locks {
		fmt.Printf("%s held by %d (%s), %d waiting\n", l.Path, l.Holder.PID, l.Holder.Cmdline, len(l.Waiters))
	}
	g := srv.Gauges()
	fmt.Printf("%d files open, %d bytes pending\n", g.OpenHandles, g.PendingBytes)
}
