package fs

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
	"github.com/safefs/safefs/lockmgr"
)

// Cluster mode (Options.Cluster): several daemons serve one BACKING and
// commit under etcd locks keyed by the path below BACKING, the same on
// every host (a logical file's inode number is this daemon's own).

func (r *root) clustered() bool { return r.opts.Cluster != nil }

func (r *root) newLocks() lockmgr.Backend {
	m := lockmgr.New(lockmgr.Options{Timeout: r.opts.LockTimeout, MaxWaiters: r.opts.MaxWaiters})
	if r.clustered() {
		return r.opts.Cluster.Locks(m)
	}
	return lockmgr.Local(m)
}

// lockKey is n's commit lock: its logical file here, its path in etcd.
func (n *Node) lockKey() lockmgr.Key {
	k := lockmgr.Key{ID: n.f.ino}
	if n.r.clustered() {
		k.Name = n.path()
	}
	return k
}

// version is what a replace records for other daemons: the inode it
// publishes, then the one it replaces (still the file's if its rename
// fails). Inode numbers, not devices: those differ per NFS client.
func version(published, replaced uint64) string {
	return strconv.FormatUint(published, 10) + " " + strconv.FormatUint(replaced, 10)
}

// adoptPublished: in a cluster, a name of n that leads to st, a regular
// file another daemon published there (etcd says so), becomes n's
// committed version, so that an open or a stat after another daemon's
// commit goes on instead of failing with ESTALE (which the kernel
// retries only once: a file rewritten in a loop elsewhere would fail).
// Anything else at the name is still another file.
func (n *Node) adoptPublished(rel string, st *unix.Stat_t) bool {
	if !n.r.clustered() || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false
	}
	v, err := n.r.opts.Cluster.Published(context.Background(), rel)
	if err != nil || !slices.Contains(strings.Fields(v), strconv.FormatUint(st.Ino, 10)) {
		return false
	}
	n.r.ids.rekey(n.f, keyOf(st))
	n.repinNamed()
	n.f.bump()
	return true
}

// committedElsewhere reports whether ino is a version another daemon of
// the cluster published at name (read under the lock): then a name
// that leads to it was changed through a mount, not directly in BACKING.
func committedElsewhere(g lockmgr.Held, name string, ino uint64) bool {
	for _, v := range strings.Fields(g.Version(name)) {
		if v == strconv.FormatUint(ino, 10) {
			return true
		}
	}
	return false
}

// adopt: under the lock, a name of n that leads to a regular file
// another daemon committed becomes n's committed version, so this
// daemon's commit goes on from it instead of failing with ESTALE.
func (n *Node) adopt(g lockmgr.Held) bool {
	if !n.r.clustered() {
		return false
	}
	for _, o := range n.f.nameList() {
		var st unix.Stat_t
		err := o.withDir(func(dir int) (err error) {
			st, err = backing.StatAt(dir, o.name)
			return err
		})
		if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		if committedElsewhere(g, o.rel(), st.Ino) {
			n.r.ids.rekey(n.f, keyOf(&st))
			n.repinNamed()
			n.f.bump()
			n.r.log.Debug("cluster: adopted a version committed by another daemon", zap.String("path", logPath(o.rel())))
			return true
		}
	}
	return false
}

// clusterErrno maps the cluster's errors to the documented errnos:
// a lease lost before publishing is ESTALE, etcd unreachable ENOLCK.
func clusterErrno(err error) (error, bool) {
	switch {
	case errors.Is(err, lockmgr.ErrFenced):
		return syscall.ESTALE, true
	case errors.Is(err, lockmgr.ErrUnavailable):
		return syscall.ENOLCK, true
	}
	return err, false
}

// grant is a commit's lock, the name it was taken for, and whose commit
// it is.
type grant struct {
	lockmgr.Held
	name string
	h    *handle
}

// fence is the last check before a commit publishes (see Held.Fence);
// ver is what a replace records for the other daemons ("": nothing).
// The committing process's script locks, and its read-modify-write
// session's cluster lock, must still live, too.
func (g grant) fence(ver string) error {
	if err := g.Fence(g.name, ver); err != nil {
		return err
	}
	if err := g.h.scriptLocksLive(g.Lease()); err != nil {
		return err
	}
	return g.h.rmwLive(g.Lease())
}

// attrTimeout: in cluster mode attributes are never cached, since
// another daemon's commit does not invalidate this kernel's cache; an
// open goes by name anyway (a name that leads elsewhere is ESTALE, and
// the kernel looks it up again), so it reads the new version.
func (r *root) attrTimeout(f *file, ver uint64) time.Duration {
	if r.clustered() {
		return 0
	}
	return f.attrTimeout(ver)
}
