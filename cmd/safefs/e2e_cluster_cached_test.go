package main

// Cluster mode over shared storage that caches, as NFS clients do: each
// host's safefs serves its own view of BACKING through go-fuse's
// loopback file system (testdata/loopback), which lets the kernel cache
// attributes and names for -ttl (1 s: libfuse's defaults), as NFS's
// attribute and lookup caches would; -ttl 0 is NFS with
// lookupcache=none,actimeo=0.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// startLoopback mounts go-fuse's example loopback of dir on a new mount
// point and returns it; the cleanup unmounts it (lazily, by its mount
// point) and kills the process.
func startLoopback(t *testing.T, bin, ttl, dir, name string) string {
	t.Helper()
	mnt := filepath.Join(tempDir(t), name)
	require.NoError(t, os.Mkdir(mnt, 0o755))
	p := startProc(t, exec.Command(bin, "-ttl", ttl, mnt, dir))
	t.Cleanup(func() { unmountIfMounted(t, mnt) }) // runs before startProc's kill
	deadline := time.Now().Add(mountLimit)
	for {
		if _, ok := mountType(t, mnt); ok {
			return mnt
		}
		select {
		case <-p.exited:
			t.Fatalf("loopback exited: %v\n%s", p.waitErr, p.out)
		default:
		}
		require.True(t, time.Now().Before(deadline), "loopback did not mount:\n%s", p.out)
		time.Sleep(20 * time.Millisecond)
	}
}

// Careful counters (flock, read, rewrite) on two daemons, each over its
// own view of one BACKING that does not cache names or attributes: the
// count holds.
func TestClusterUncachedBacking(t *testing.T) { cachedBacking(t, "0s") }

// The same over views that cache them for 1 s: every increment's close
// succeeds, yet the count does not hold (about half the increments are
// lost): a host opens the name its kernel still resolves to a version
// the other host has replaced. A known limitation (docs/operations.md
// says what NFS clients must turn off); runs with
// SAFEFS_TEST_KNOWN_BUGS=1.
func TestClusterCachedBacking(t *testing.T) {
	if os.Getenv("SAFEFS_TEST_KNOWN_BUGS") != "1" {
		t.Skip("known limitation: a BACKING whose clients cache names and attributes loses updates " +
			"across hosts (SAFEFS_TEST_KNOWN_BUGS=1 runs it)")
	}
	cachedBacking(t, "1s")
}

func cachedBacking(t *testing.T, ttl string) {
	clusterPrereqs(t)
	bin := filepath.Join(tempDir(t), "loopback")
	out, err := exec.Command("go", "build", "-o", bin, "./testdata/loopback").CombinedOutput()
	require.NoError(t, err, "build testdata/loopback: %s", out)
	e := startEtcd(t)
	shared := tempDir(t)
	require.NoError(t, os.WriteFile(filepath.Join(shared, "count"), []byte("0\n"), 0o644))
	var mnts []string
	for _, node := range []string{"h1", "h2"} {
		view := startLoopback(t, bin, ttl, shared, "view-"+node)
		// The kill-check self-test fails over a FUSE BACKING: off.
		mnt := nodeMnt(t, node)
		startNodeWith(t, e, view, mnt, node, []string{"kill_check=off"}, nil)
		mnts = append(mnts, mnt)
	}
	const hosts, perHost, runs = 2, 4, 50
	var ps []*proc
	for i := range hosts * perHost {
		ps = append(ps, startProc(t, exec.Command("perl", "-e", carefulCounter, filepath.Join(mnts[i%hosts], "count"), strconv.Itoa(runs))))
	}
	oks, errs := 0, map[string]int{}
	for _, p := range ps {
		for _, l := range strings.Split(strings.TrimSpace(p.wait(t)), "\n") {
			f := strings.Fields(l)
			if len(f) == 2 && f[0] == "ok" {
				oks++
			} else {
				errs[l]++
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(shared, "count"))
	require.NoError(t, err)
	t.Logf("ttl %s: %d increments done, failed steps %v, the counter %q", ttl, oks, errs, strings.TrimSpace(string(b)))
	require.Equal(t, hosts*perHost*runs, oks, "increments done (failed steps: %v)", errs)
	require.Equal(t, fmt.Sprintf("%d\n", hosts*perHost*runs), string(b), "the counter")
}
