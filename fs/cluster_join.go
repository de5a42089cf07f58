package fs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
	"github.com/safefs/safefs/internal/owndir"
	"github.com/safefs/safefs/journal"
	"github.com/safefs/safefs/lockmgr"
)

// In cluster mode .safefs holds, besides what a single daemon keeps
// there, the cluster's name (clusterName) and one directory per node,
// nodes/NODE, with that node's staging, undo, rejected, journal and
// lock. .safefs/lock excludes: a daemon outside a cluster holds it
// exclusive, cluster daemons hold it shared.
const (
	clusterName = "cluster"
	nodesDir    = "nodes"
)

// ErrCluster means BACKING is served in another mode or by another
// cluster: the mount is refused (exit 6, as ErrBusy).
var ErrCluster = errors.New("backing directory is served by safefs daemons of another kind")

// joinCluster takes .safefs/lock shared and checks the cluster's name,
// then makes the node's own directory the internal directory and takes
// its lock (one daemon per node name).
func (r *root) joinCluster() (func(), error) {
	name := r.opts.Cluster.Name()
	lf, err := r.joinLock(name)
	if err != nil {
		return nil, err
	}
	unlockNode, err := r.enterNode()
	if err != nil {
		lf.Close()
		return nil, err
	}
	return sync.OnceFunc(func() { unlockNode(); lf.Close() }), nil
}

// joinLock: the first daemon of a cluster (it gets the lock exclusive:
// nobody serves BACKING) writes the cluster's name and settles what any
// daemon left behind; the others check the name.
func (r *root) joinLock(name string) (*os.File, error) {
	fd, err := backing.OpenAt(int(r.internal.Fd()), "lock", unix.O_RDWR|unix.O_CREAT, 0o600)
	if err != nil {
		return nil, err
	}
	lf := os.NewFile(uintptr(fd), "lock")
	for range 20 {
		if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) == nil {
			err = r.firstOfCluster(name)
			if err == nil {
				err = unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB)
			}
			if err == nil {
				return lf, nil
			}
			if !errors.Is(err, unix.EWOULDBLOCK) {
				lf.Close()
				return nil, err
			}
		} else if unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB) == nil {
			have, rerr := r.readClusterName()
			if rerr == nil && have == name {
				return lf, nil
			}
			lf.Close()
			return nil, fmt.Errorf("%w: it is served by cluster %q, this daemon is of cluster %q", ErrCluster, have, name)
		}
		// Held exclusive: a daemon outside any cluster, or one of
		// this cluster writing its name: that one lets go soon.
		time.Sleep(50 * time.Millisecond)
	}
	lf.Close()
	return nil, fmt.Errorf("%w: it is served by a safefs that is not in a cluster", ErrCluster)
}

func (r *root) readClusterName() (string, error) {
	b, err := os.ReadFile(backing.ProcPath(int(r.internal.Fd())) + "/" + clusterName)
	return strings.TrimSpace(string(b)), err
}

// firstOfCluster runs while no daemon serves BACKING: it records the
// cluster's name and settles the journals of a daemon outside the
// cluster and of every node, none of which can be running.
func (r *root) firstOfCluster(name string) error {
	dir := int(r.internal.Fd())
	tmp := clusterName + ".new"
	fd, err := backing.OpenAt(dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = unix.Write(fd, []byte(name+"\n"))
	unix.Close(fd)
	if err == nil {
		err = backing.RenameAt(dir, tmp, dir, clusterName, 0)
	}
	if err != nil {
		return err
	}
	if _, err := journal.Recover(r.internal, backing.Targets{Root: r.rootfd}, r.log); err != nil {
		return fmt.Errorf("recovery of %s: %w", r.internalPath, err)
	}
	_, err = r.recoverNodes()
	return err
}

// recoverNodes settles every node's journal (nobody serves BACKING: the
// first daemon of a cluster, a plain daemon, `safefs recover`).
func (r *root) recoverNodes() (journal.Summary, error) {
	var sum journal.Summary
	nodes, err := owndir.Open(int(r.internal.Fd()), nodesDir, unix.O_RDONLY)
	if err != nil {
		return sum, err
	}
	defer unix.Close(nodes)
	ents, err := os.ReadDir(backing.ProcPath(nodes))
	if err != nil {
		return sum, err
	}
	for _, e := range ents {
		d, err := owndir.Open(nodes, e.Name(), unix.O_RDONLY)
		if err != nil {
			r.log.Error("cluster: node directory not recovered", zap.String("node", e.Name()), zap.Error(err))
			continue
		}
		f := os.NewFile(uintptr(d), e.Name())
		s, err := journal.Recover(f, sharedTargets{backing.Targets{Root: r.rootfd}}, r.log.With(zap.String("node", e.Name())))
		f.Close()
		if err != nil {
			return sum, err
		}
		sum.Add(s)
	}
	return sum, nil
}

// hasNodes reports whether cluster daemons ever served BACKING.
func (r *root) hasNodes() bool {
	_, err := backing.StatAt(int(r.internal.Fd()), nodesDir)
	return err == nil
}

// enterNode makes .safefs/nodes/NODE the internal directory.
func (r *root) enterNode() (func(), error) {
	node := r.opts.Cluster.Node()
	if backing.CheckName(node) != nil {
		return nil, fmt.Errorf("bad node name %q", node)
	}
	nodes, err := owndir.Open(int(r.internal.Fd()), nodesDir, unix.O_PATH)
	if err != nil {
		return nil, err
	}
	defer unix.Close(nodes)
	r.closeInternal()
	r.internalPath = filepath.Join(r.internalPath, nodesDir, node)
	if err := r.openInternalIn(nodes, node, r.internalPath); err != nil {
		return nil, fmt.Errorf("node directory: %w", err)
	}
	unlock, err := journal.Lock(r.internal)
	if errors.Is(err, journal.ErrLocked) {
		return nil, fmt.Errorf("%w: node %q already runs", ErrBusy, node)
	}
	return unlock, err
}

// clusterTargets opens recovery targets under their cluster locks, so
// that a node restarting settles its cut-off commits while no other
// daemon commits those files. The locks are held until release.
type clusterTargets struct {
	backing.Targets
	r    *root
	mu   sync.Mutex
	held []lockmgr.Held
	next uint64
}

func (t *clusterTargets) OpenTarget(rel string) (*os.File, error) {
	// The dead daemon's keys live until its lease's TTL ends.
	ttl := t.r.opts.Cluster.LeaseTTL()
	ctx, cancel := context.WithTimeout(context.Background(), t.r.opts.LockTimeout+ttl)
	defer cancel()
	t.mu.Lock()
	t.next++
	id := t.next
	t.mu.Unlock()
	g, err := t.r.locks.Lock(ctx, "recovery", lockmgr.Key{ID: id, Name: rel})
	if err != nil {
		return nil, fmt.Errorf("cluster lock of %s: %w", rel, err)
	}
	t.mu.Lock()
	t.held = append(t.held, g)
	t.mu.Unlock()
	return t.Targets.OpenTarget(rel)
}

// Shared: other daemons commit to these files too (journal.SharedTargets).
func (t *clusterTargets) Shared() bool { return true }

// sharedTargets are the targets of the nodes' journals settled by the
// first daemon of a cluster: shared too.
type sharedTargets struct{ backing.Targets }

func (sharedTargets) Shared() bool { return true }

func (t *clusterTargets) release() {
	for _, g := range t.held {
		g.Release()
	}
	t.held = nil
}
