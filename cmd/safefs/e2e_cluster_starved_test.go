package main

// A host's daemon starved of CPU (not stopped: it runs, a few
// microseconds a second) past lease_ttl while one of its processes holds
// a script lock, the other host going on: no increment is lost without
// an error somewhere.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"
)

// h1's daemon is starved while its process holds the counter's flock
// (read, not written yet); careful counters run on both hosts meanwhile.
// h1's lease expires in etcd (waited for: the held lock's key goes with
// it), h2's counters then take the lock and finish. Once h1 runs again
// and has a new lease, the held process writes: its close fails with
// ESTALE and its bytes are in rejected/. Every step of every counter
// succeeded or failed with a documented errno (flock ENOLCK while h1 has
// no lease, close ESTALE), and the counter is exactly the increments
// whose close succeeded; every failed close's bytes are in rejected/.
func TestClusterHostsStarvedUnderScriptLock(t *testing.T) {
	clusterPrereqs(t)
	cg := newStarver(t)
	e := startEtcd(t)
	backing := tempDir(t)
	require.NoError(t, os.WriteFile(filepath.Join(backing, "count"), []byte("41\n"), 0o644))
	var mnts []string
	var ds []*mountProc
	for _, node := range []string{"h1", "h2"} {
		mnt := nodeMnt(t, node)
		ds = append(ds, startNodeWith(t, e, backing, mnt, node, nil, nil))
		mnts = append(mnts, mnt)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, d := range ds {
				t.Logf("h%d's warnings and errors:\n%s", i+1, warnings(d.out.String()))
			}
		}
	})
	goFile := filepath.Join(tempDir(t), "go")
	held := lockPerl(t, stalledCounter, "flock", "data", filepath.Join(mnts[0], "count"), "", "after", goFile)
	waitOut(t, held, "read 41")
	gone := watchLockKey(t, e.Client(t), "count", "h1")

	const perHost, runs = 3, 5
	var counters []*proc
	for i := range 2 * perHost {
		file := filepath.Join(mnts[i%2], "count")
		counters = append(counters, startProc(t, exec.Command("perl", "-e", carefulCounter, file, strconv.Itoa(runs))))
	}
	pid := ds[0].cmd.Process.Pid
	cg.starve(t, pid)
	select {
	case <-gone: // h1's lease expired in etcd while h1 was starved
	case <-time.After(waitLimit):
		t.Fatalf("h1's lease did not expire in %v of starvation", waitLimit)
	}
	outs := make([]string, len(counters))
	for i := 1; i < len(counters); i += 2 {
		outs[i] = counters[i].wait(t) // h2 goes on without h1
	}
	cg.release(t, pid)
	waitLine(t, ds[0].proc, "etcd lease renewed")
	require.NoError(t, os.WriteFile(goFile, nil, 0o644))
	waitOut(t, held, fmt.Sprintf("close err %d", syscall.ESTALE))
	for i := 0; i < len(counters); i += 2 {
		outs[i] = counters[i].wait(t)
	}

	oks, failedCloses := 0, 1 // the held process's
	for i, out := range outs {
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			switch l {
			case fmt.Sprintf("err flock %d", syscall.ENOLCK):
			case fmt.Sprintf("err close %d", syscall.ESTALE):
				failedCloses++
			default:
				require.Regexp(t, `^ok \d+$`, l, "counter %d (on h%d)", i, i%2+1)
				oks++
			}
		}
	}
	require.Equal(t, 2*perHost*runs, oks, "increments done")
	assert.Equal(t, 41+oks, readCount(t, filepath.Join(backing, "count")), "the counter: every close that succeeded, no other")
	kept := rejectedFiles(t, backing, "h1")
	assert.Len(t, append(kept, rejectedFiles(t, backing, "h2")...), failedCloses, "every failed close's bytes kept")
	var held42 bool
	for _, k := range kept {
		b, err := os.ReadFile(filepath.Join(backing, ".safefs", "nodes", "h1", "rejected", k))
		require.NoError(t, err)
		held42 = held42 || string(b) == "42\n"
	}
	assert.True(t, held42, "the held process's write (42) in h1's rejected/")
	t.Logf("%d increments, %d failed closes kept in rejected/", oks, failedCloses)
}

// watchLockKey returns a channel closed when node's flock key of path
// in the script lock table goes from etcd (it must be there now): its
// holder keeps it, so it goes when the node's lease expires.
func watchLockKey(t *testing.T, cli *clientv3.Client, path, node string) <-chan struct{} {
	t.Helper()
	pfx := "/safefs/test/locks/" + path + "\x00" + node + "\x00"
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	g, err := cli.Get(ctx, pfx, clientv3.WithPrefix())
	require.NoError(t, err)
	require.Len(t, g.Kvs, 1, "%s's lock of %s in etcd", node, path)
	require.NotZero(t, g.Kvs[0].Lease, "the lock key carries the node's lease")
	ch := cli.Watch(ctx, string(g.Kvs[0].Key), clientv3.WithRev(g.Header.Revision+1))
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		for wr := range ch {
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					return
				}
			}
		}
	}()
	return gone
}

// starver starves processes of CPU: a cgroup (cpu controller, v1 or
// v2) whose quota, 1 ms a second, busy loops in it use up, the
// process's threads at SCHED_IDLE beside them on one CPU. It runs a
// few microseconds a second: far too little to renew a lease, but
// never stopped. The loops use 1 ms of CPU a second in all.
type starver struct {
	dir  string // the cgroup
	base string // the hierarchy's root
	cpu  int
	hogs []*exec.Cmd
}

func newStarver(t *testing.T) *starver {
	t.Helper()
	s := &starver{}
	var limit func() error
	switch {
	case fileExists("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"):
		s.base = "/sys/fs/cgroup/cpu"
		limit = func() error {
			if err := writeCgroup(s.dir, "cpu.cfs_period_us", "1000000"); err != nil {
				return err
			}
			return writeCgroup(s.dir, "cpu.cfs_quota_us", "1000")
		}
	case hasCPUController("/sys/fs/cgroup"):
		s.base = "/sys/fs/cgroup"
		if err := writeCgroup(s.base, "cgroup.subtree_control", "+cpu"); err != nil {
			t.Fatalf("cgroup v2: enable the cpu controller: %v", err)
		}
		limit = func() error { return writeCgroup(s.dir, "cpu.max", "1000 1000000") }
	default:
		if os.Getenv("CI") != "" {
			t.Fatal("no writable cgroup cpu controller and CI is set: this test starves a daemon through one")
		}
		t.Skip("no cgroup cpu controller")
	}
	s.dir = filepath.Join(s.base, fmt.Sprintf("safefs-starve-%d", os.Getpid()))
	require.NoError(t, os.Mkdir(s.dir, 0o755), "a cgroup (is %s writable?)", s.base)
	t.Cleanup(func() { s.close(t) })
	require.NoError(t, limit())
	var set unix.CPUSet
	require.NoError(t, unix.SchedGetaffinity(0, &set))
	for s.cpu = 0; !set.IsSet(s.cpu); s.cpu++ {
	}
	for range 2 {
		hog := exec.Command("sh", "-c", "while :; do :; done")
		require.NoError(t, hog.Start())
		s.hogs = append(s.hogs, hog)
		require.NoError(t, writeCgroup(s.dir, "cgroup.procs", strconv.Itoa(hog.Process.Pid)))
		s.pin(t, hog.Process.Pid, unix.SCHED_NORMAL)
	}
	return s
}

// starve moves pid (all its threads) into the cgroup, at SCHED_IDLE on
// the loops' CPU; threads it makes later inherit all three.
func (s *starver) starve(t *testing.T, pid int) {
	t.Helper()
	s.pin(t, pid, unix.SCHED_IDLE)
	require.NoError(t, writeCgroup(s.dir, "cgroup.procs", strconv.Itoa(pid)))
}

// release gives pid back its cgroup, policy and CPUs.
func (s *starver) release(t *testing.T, pid int) {
	t.Helper()
	require.NoError(t, writeCgroup(s.base, "cgroup.procs", strconv.Itoa(pid)))
	var all unix.CPUSet
	require.NoError(t, unix.SchedGetaffinity(0, &all))
	for _, tid := range threads(t, pid) {
		_ = unix.SchedSetAttr(tid, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_NORMAL}, 0)
		_ = unix.SchedSetaffinity(tid, &all)
	}
}

// pin sets every thread of pid to policy on the starver's CPU.
func (s *starver) pin(t *testing.T, pid int, policy uint32) {
	t.Helper()
	var one unix.CPUSet
	one.Set(s.cpu)
	for _, tid := range threads(t, pid) {
		// A thread may exit meanwhile: ESRCH is not a failure.
		if err := unix.SchedSetaffinity(tid, &one); err != nil && err != unix.ESRCH {
			t.Fatalf("affinity of %d: %v", tid, err)
		}
		err := unix.SchedSetAttr(tid, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: policy}, 0)
		if err != nil && err != unix.ESRCH {
			t.Fatalf("policy of %d: %v", tid, err)
		}
	}
}

// close ends the loops, moves whatever is left in the cgroup out (a
// daemon whose test failed while starved) and removes it.
func (s *starver) close(t *testing.T) {
	for _, h := range s.hogs {
		_ = h.Process.Kill()
		_ = h.Wait()
	}
	b, _ := os.ReadFile(filepath.Join(s.dir, "cgroup.procs"))
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			s.release(t, pid)
		}
	}
	if err := os.Remove(s.dir); err != nil {
		t.Errorf("cgroup %s left: %v", s.dir, err)
	}
}

func threads(t *testing.T, pid int) []int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	require.NoError(t, err)
	var out []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, tid)
		}
	}
	return out
}

func hasCPUController(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	return err == nil && slices.Contains(strings.Fields(string(b)), "cpu")
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func writeCgroup(dir, name, v string) error {
	return os.WriteFile(filepath.Join(dir, name), []byte(v), 0o644)
}
