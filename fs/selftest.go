package fs

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
	"github.com/safefs/safefs/internal/staging"
)

// selfTestPrefix names the probe file of the kill-check self-test. It
// is reached at the top of the mount for the few milliseconds of the
// test, and lives in the internal directory.
const selfTestPrefix = ".safefs-selftest-"

// killCheckSelfTest proves, at mount, that a writer killed by SIGKILL is
// seen as killed: a shell opens a probe file through the mount, writes
// one byte, and kills itself. The write must not commit.
//
// The probe must be the daemon's alone: in BACKING, which www-data may
// own, one byte written into it made every mount fail. So its name at
// the top of the mount leads into the internal directory, where no one
// else writes, and only for the daemon's own uid: others find no such
// name, and cannot remove it.
func (r *root) killCheckSelfTest(mountpoint string) bool {
	nm := selfTestPrefix + staging.TempName()
	r.probe.Store(&nm)
	defer r.probe.Store(nil)
	probe := filepath.Join(mountpoint, nm)
	r.selfTestSeen.Store(false)
	// The daemon's umask is 0 once mounted: the probe is made 0600.
	cmd := exec.Command("/bin/sh", "-c", `umask 077 && exec >>"$0" && printf x && kill -KILL $$`, probe)
	_ = cmd.Run() // it dies by SIGKILL: an error is the expected outcome
	// A stop point for tests only.
	r.crash("selftest-killed")
	st, err := os.Stat(probe)
	defer os.Remove(probe)
	ok := err == nil && st.Size() == 0 && r.selfTestSeen.Load()
	if ok {
		r.log.Info("kill-check self-test passed: a writer killed by SIGKILL did not commit")
	} else {
		r.log.Error("kill-check self-test failed: writers killed by a signal would commit",
			zap.NamedError("stat", err))
	}
	return ok
}

// dropProbes removes probes left in the internal directory by a daemon
// that died during its self-test.
func (r *root) dropProbes() {
	dir := int(r.internal.Fd())
	names, _ := backing.ReadDirNames(dir)
	for _, nm := range names {
		if !strings.HasPrefix(nm, selfTestPrefix) {
			continue
		}
		if err := backing.UnlinkAt(dir, nm, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			r.log.Warn("could not remove an old self-test probe", zap.String("name", nm), zap.Error(err))
		}
	}
}

// isSelfTestProbe reports whether path (below the mount root) is the
// probe of the self-test running now.
func (r *root) isSelfTestProbe(path string) bool {
	p := r.probe.Load()
	return p != nil && path == *p
}

// isProbe reports whether nm in n is the probe of the self-test running
// now.
func (n *Node) isProbe(nm string) bool {
	return n.isRoot() && n.r.isSelfTestProbe(nm)
}

// probeHidden reports whether nm in n is the probe and the caller is not
// the daemon's uid: to everyone else its lookup, create and unlink are
// EACCES (not ENOENT, which the kernel would cache as a negative entry
// that the daemon's own requests would then meet), and so are mkdir,
// mknod, symlink, link and rename of the name to every uid: a directory
// or FIFO made there would make the self-test's open fail or hang.
func (n *Node) probeHidden(ctx context.Context, nm string) bool {
	return n.isProbe(nm) && callerUID(ctx) != uint32(os.Geteuid())
}

// holdEntryDir holds the fd of the directory that holds entry nm of n,
// as holdDir does: n's own (writeDir's, when write: a create or
// remove), or the internal directory for the probe, which is never
// closed. drop ends the hold.
func (n *Node) holdEntryDir(nm string, write bool) (fd int, drop func(), err error) {
	switch {
	case n.isProbe(nm):
		return int(n.r.internal.Fd()), func() {}, nil
	case write:
		fd, err = n.writeDir()
	default:
		fd, err = n.holdDir()
	}
	if err != nil {
		return -1, func() {}, err
	}
	return fd, n.dropDir, nil
}

// holdDir holds the fd of the directory that holds name o (see
// holdEntryDir).
func (o name) holdDir() (int, func(), error) { return o.dir.holdEntryDir(o.name, false) }

// withDir runs fn on the fd of the directory that holds name o.
func (o name) withDir(fn func(dir int) error) error {
	fd, drop, err := o.holdDir()
	if err != nil {
		return err
	}
	defer drop()
	return fn(fd)
}
