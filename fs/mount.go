package fs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
	"github.com/safefs/safefs/internal/fuseprocs"
	"github.com/safefs/safefs/internal/limits"
	"github.com/safefs/safefs/internal/mountinfo"
	"github.com/safefs/safefs/internal/mountroot"
	"github.com/safefs/safefs/internal/mountwatch"
	"github.com/safefs/safefs/internal/proc"
	"github.com/safefs/safefs/internal/staging"
	"github.com/safefs/safefs/journal"
	"github.com/safefs/safefs/scriptlock"
)

// ErrBusy means another safefs already serves this backing directory.
var ErrBusy = errors.New("backing directory is already served by another safefs")

// ErrKillCheck means the kill-check self-test failed at mount: writers
// killed by a signal would commit (the daemon cannot read its callers in
// /proc, e.g. it runs in a pid namespace of its own with the host's
// /proc). Mount with KillCheck off to run without that promise.
var ErrKillCheck = errors.New("kill-check self-test failed: a writer killed by a signal would commit; " +
	"mount with -o kill_check=off to run without that check")

// Server is a mounted safefs.
type Server struct {
	srv    *fuse.Server
	r      *root
	unlock func()
	once   sync.Once
	watch  *mountwatch.Watch // an unmount from outside (mountwatch.go)
}

// state is what Mount and Recover open in BACKING before anything else.
type state struct {
	r      *root
	unlock func()
}

// open checks and opens the internal directory and takes BACKING's lock.
func open(backing string, o Options) (*state, error) {
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	abs, err := filepath.Abs(backing)
	if err != nil {
		return nil, err
	}
	rootfd, err := unix.Open(abs, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open backing %s: %w", abs, err)
	}
	r := &root{rootfd: rootfd, stagingfd: -1, undofd: -1, rejectedfd: -1, opts: o, log: log, ids: newIDs(),
		crashAt: os.Getenv("SAFEFS_CRASH_AT"), stopAt: os.Getenv("SAFEFS_STOP_AT"), internalPath: filepath.Join(abs, InternalDir)}
	r.testLeaseWait, _ = time.ParseDuration(os.Getenv("SAFEFS_TEST_LEASE_WAIT"))
	if err := r.openInternal(); err != nil {
		r.closeFds()
		return nil, fmt.Errorf("internal directory: %w", err)
	}
	var unlock func()
	if r.clustered() {
		unlock, err = r.joinCluster()
	} else {
		unlock, err = journal.Lock(r.internal)
	}
	if err != nil {
		r.closeFds()
		if errors.Is(err, journal.ErrLocked) {
			return nil, fmt.Errorf("%s: %w", abs, ErrBusy)
		}
		return nil, err
	}
	return &state{r: r, unlock: unlock}, nil
}

func (r *root) closeFds() {
	r.closeInternal()
	closeFd(r.rootfd)
}

func (s *state) close() {
	s.unlock()
	s.r.closeFds()
}

// Recover finishes or undoes commits cut off in backing, without mounting.
func Recover(backing string, o Options) (journal.Summary, error) {
	s, err := open(backing, o)
	if err != nil {
		return journal.Summary{}, err
	}
	defer s.close()
	return s.r.recover()
}

// recover settles this daemon's journal; a cluster node does it under
// the cluster locks of the files its records name.
func (r *root) recover() (journal.Summary, error) {
	if !r.clustered() {
		sum, err := journal.Recover(r.internal, backing.Targets{Root: r.rootfd}, r.log)
		if err != nil || !r.hasNodes() {
			return sum, err
		}
		// A plain daemon holds BACKING alone: no node runs, and the
		// commits cut off when the cluster last served it are settled.
		nodes, err := r.recoverNodes()
		sum.Add(nodes)
		return sum, err
	}
	r.locks = r.newLocks()
	t := &clusterTargets{Targets: backing.Targets{Root: r.rootfd}, r: r}
	defer t.release()
	return journal.Recover(r.internal, t, r.log)
}

// Mount takes the backing directory's lock, recovers any cut-off commit,
// and mounts safefs on mountpoint. It returns once the mount is visible
// in /proc/mounts (type fuse.safefs).
func Mount(backing, mountpoint string, o Options) (*Server, error) {
	if o.VersionCache && o.Cluster != nil {
		// A version adopted from another daemon does not move the
		// file's kernel inodes on.
		return nil, errors.New("VersionCache is not built for cluster mode")
	}
	if o.KernelLocks && (o.VersionCache || o.ScriptLocks != nil) {
		// One file, several kernel inodes: the kernel's locks would not
		// exclude across them.
		return nil, errors.New("KernelLocks needs VersionCache off and no ScriptLocks")
	}
	if !o.KernelLocks && o.ScriptLocks == nil {
		// Unlocks must reach the daemon (unlock.go).
		o.ScriptLocks = scriptlock.NewMemory()
	}
	s, err := open(backing, o)
	if err != nil {
		return nil, err
	}
	srv, err := s.mount(backing, mountpoint)
	if err != nil {
		s.close()
		return nil, err
	}
	return srv, nil
}

func (s *state) mount(backingDir, mountpoint string) (*Server, error) {
	r := s.r
	sum, err := r.recover()
	if err != nil {
		return nil, fmt.Errorf("recovery: %w", err)
	}
	r.obsRecovered(sum)
	r.loadKept()
	r.files = limits.NewFiles(r.opts.MaxFilesPerUser)
	if r.jr, err = journal.Open(r.internal, r.opts.Durable, r.log); err != nil {
		return nil, err
	}
	r.locks = r.newLocks()
	if err := r.rmwStart(); err != nil {
		r.jr.Close()
		return nil, err
	}
	st, err := backing.Fstat(r.rootfd)
	if err != nil {
		return nil, err
	}
	r.top = newFile(1, unix.S_IFDIR, keyOf(&st))
	r.ids.add(r.top)
	// Modes arrive from the kernel with the caller's umask applied.
	unix.Umask(0)
	// As /proc/self/mountinfo shows it: absolute, no symlinks.
	if r.mountpoint, err = filepath.Abs(mountpoint); err != nil {
		return nil, err
	}
	if real, err := filepath.EvalSymlinks(r.mountpoint); err == nil {
		r.mountpoint = real
	}
	r.pool = staging.NewPool(r.stagingfd, r.opts.StagingPool, r.log)
	srv, err := r.serve(mountpoint, backingDir)
	if err != nil {
		r.pool.Close()
		r.jr.Close()
		return nil, err
	}
	r.dropProbes()
	if r.opts.KillCheck && !r.opts.ReadOnly && !r.killCheckSelfTest(mountpoint) {
		// Serving would break a promise silently: the operator decides.
		_ = srv.Unmount()
		srv.Wait()
		r.pool.Close()
		r.jr.Close()
		return nil, ErrKillCheck
	}
	mounted := &Server{srv: srv, r: r, unlock: s.unlock}
	mounted.watchMount()
	r.crash("mount-served") // a stop point for tests only: what the caller does next
	return mounted, nil
}

// serve mounts the top on mountpoint, through a hidden root where the
// mount can be swapped (mountroot.go), else as the FUSE root.
func (r *root) serve(mountpoint, backing string) (*fuse.Server, error) {
	if canSwapRoot(mountpoint) {
		srv, err := r.serveTree(mountpoint, backing, true)
		if err == nil {
			if err = swapRoot(mountpoint); err == nil {
				return r.served(srv), nil
			}
			r.log.Warn("the mount's root is the kernel's: its ACL is asked for at each path walk", zap.Error(err))
			endServe(srv, err)
		}
		if !errors.Is(err, mountroot.ErrSwap) {
			return nil, err
		}
	}
	srv, err := r.serveTree(mountpoint, backing, false)
	if err != nil {
		return nil, err
	}
	return r.served(srv), nil
}

// endServe ends a mount whose root could not be swapped: still mounted
// unless the swap got as far as detaching it.
func endServe(srv *fuse.Server, err error) {
	if !errors.Is(err, mountroot.ErrSwapDetached) {
		_ = srv.Unmount()
	}
	srv.Wait()
}

// serveTree is gofs.Mount with rawFS in between, of the top or of a
// hidden root above it.
func (r *root) serveTree(mountpoint, backing string, hidden bool) (*fuse.Server, error) {
	top := r.newNode(r.top)
	r.topNode = &top.Inode
	var fuseRoot gofs.InodeEmbedder = top
	rootIno := r.top.ino
	if hidden {
		fuseRoot, rootIno = &hiddenRoot{top: top}, hiddenRootIno
	}
	o := r.fuseOptions(backing, rootIno)
	srv, err := fuse.NewServer(rawFS{gofs.NewNodeFS(fuseRoot, o), o.EnableLocks, &r.pt, &r.cands}, mountpoint, &o.MountOptions)
	if err != nil {
		return nil, err
	}
	r.pt.srv.Store(srv)
	fuseprocs.Spare()
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		_ = srv.Unmount()
		return nil, err
	}
	return srv, nil
}

// served finishes a mount whose root is in place.
func (r *root) served(srv *fuse.Server) *fuse.Server {
	// go-fuse opens /dev/fuse without O_CLOEXEC: a process the daemon
	// starts (the kill-check self-test, or the program embedding fs)
	// would otherwise hold the connection, keep the mount alive after
	// the daemon dies, and could read and answer its requests.
	proc.CloseOnExec("/dev/fuse")
	r.writesUncache.Store(srv.KernelSettings().Minor >= 35)
	r.noteMountID()
	r.noteConnection()
	return srv
}

// SafefsMount finds the safefs mount at mountpoint in
// /proc/self/mountinfo: its mount ID and its source (BACKING).
func SafefsMount(mountpoint string) (id int, source string, found bool) {
	return mountinfo.Find(mountpoint, "fuse."+mountName)
}

func (r *root) mountID() int { return int(r.mntID.Load()) }

// noteMountID finds the mount's ID for proc.HoldsOpen; without it a close
// never counts as one of several descriptors the process holds.
func (r *root) noteMountID() {
	id, _, _ := SafefsMount(r.mountpoint)
	if id == 0 {
		r.log.Warn("mount not found in /proc/self/mountinfo: a shell's redirection that truncates a file commits at its first close",
			zap.String("mountpoint", r.mountpoint))
	}
	r.mntID.Store(int64(id))
}

// mountName is the file system type's second part: fuse.safefs.
const mountName = "safefs"

func (r *root) fuseOptions(backing string, rootIno uint64) *gofs.Options {
	zero, entry := time.Duration(0), time.Second
	mo := fuse.MountOptions{
		AllowOther:  r.opts.AllowOther,
		FsName:      backing,
		Name:        mountName,
		DirectMount: os.Geteuid() == 0,
		Options:     []string{"default_permissions", "nosuid", "nodev"},
		Debug:       r.opts.Debug,
		Logger:      zap.NewStdLog(r.log.Named("fuse")),
		// The kernel enforces POSIX ACLs (read through getxattr); with
		// DONT_MASK it leaves the umask to us, so that a default ACL can
		// replace it as on a local file system (createMode).
		EnableAcl: true,
		// DIRECT_IO_ALLOW_MMAP: shared maps work although every open is
		// direct I/O (see mmapNote).
		ExtraCapabilities:  fuse.CAP_ATOMIC_O_TRUNC | fuse.CAP_DONT_MASK | fuse.CAP_DIRECT_IO_ALLOW_MMAP,
		DisableReadDirPlus: true,
		MaxWrite:           maxWrite,
		// Reads answer from memory (ReadResultData), which go-fuse
		// would still first try to splice: a pipe written, given up
		// and drained, four calls per READ for nothing.
		DisableSplice: true,
		// Script locks decided by the daemon (locks.go), else by the kernel.
		EnableLocks: r.opts.ScriptLocks != nil,
	}
	if r.opts.ReadOnly {
		mo.Options = append(mo.Options, "ro")
	}
	// A name that does not exist is as stale as one that does, for at
	// most the entry timeout (a web server looks for .htaccess at each
	// request); names made through the mount replace it at once. Not in
	// a cluster, where another daemon makes names.
	negative := zero
	if r.opts.AbsentCache && !r.clustered() {
		negative = entry
	}
	return &gofs.Options{
		MountOptions:    mo,
		EntryTimeout:    &entry,
		AttrTimeout:     &zero,
		NegativeTimeout: &negative,
		RootStableAttr:  &gofs.StableAttr{Ino: rootIno, Mode: unix.S_IFDIR},
		NullPermissions: true, // mode 000 must stay 000 for the kernel's checks
		Logger:          zap.NewStdLog(r.log.Named("fuse")),
	}
}

// Wait blocks until the file system is unmounted, then releases BACKING.
func (s *Server) Wait() {
	s.srv.Wait()
	s.release()
}

// Unmount unmounts, waits for the serve loop to end and releases BACKING.
func (s *Server) Unmount() error {
	if err := s.unmount(); err != nil {
		return err
	}
	s.release()
	return nil
}

func (s *Server) release() {
	s.once.Do(func() {
		s.stopWatch()
		r := s.r
		// The kernel need not release every handle nor forget every
		// inode before an unmount completes: finish them here, so that
		// nothing of BACKING stays open (busy) afterwards.
		for _, f := range r.ids.all() {
			for _, h := range f.handleList() {
				r.releaseHandle(h)
			}
			f.dropGhost()
			f.dropReaderFds()
		}
		r.dirs.CloseAll()
		r.pool.Close()
		r.rmwStop()
		r.logStats()
		r.checkpoint() // so that the journal closes empty
		if err := r.jr.Close(); err != nil {
			r.log.Warn("journal close", zap.Error(err))
		}
		s.unlock()
		r.closeFds()
	})
}
