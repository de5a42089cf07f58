package main

// The cluster table: commits/s with in-process commit locks
// against etcd-backed ones, with one and with two daemons serving one
// BACKING, each etcd row with its ratio to the row above. Separate from
// the main table: it needs an etcd (-etcd URL).

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/cluster"
	safefs "github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/scriptlock/etcdlock"
)

// clusterWriters is how many goroutines commit at once in each cell.
const clusterWriters = 4

type clusterRow struct {
	name    string
	daemons int  // mounts of the one BACKING
	etcd    bool // commit locks through etcd
}

var clusterRows = []clusterRow{
	{"safefs, in-process locks", 1, false},
	{"safefs-etcd, 1 daemon", 1, true},
	{"safefs-etcd, 2 daemons", 2, true},
}

type clusterCol struct {
	name string
	run  func(mnts []string, n int) error // n commits per writer
}

var clusterCols = []clusterCol{
	{"rewrite-4k, own file each (commits/s)", rewriteOwn},
	{"append-100, one file (commits/s)", appendShared},
	{"careful counter, one file (increments/s)", carefulCounters},
}

// clusterBench prints the table; a cell that cannot run says error.
func clusterBench(w io.Writer, dir, etcdURL string, n int, markdown bool) {
	fmt.Fprintf(w, "cluster: %d writers, %d commits each, etcd %s\n\n", clusterWriters, n, orNoEtcd(etcdURL))
	head := []string{"configuration"}
	for _, c := range clusterCols {
		head = append(head, c.name)
	}
	grid := [][]string{head}
	prev := make([]float64, len(clusterCols))
	for i, r := range clusterRows {
		cells := []string{r.name}
		for j, c := range clusterCols {
			rate, err := clusterCell(dir, etcdURL, r, c, n)
			cells = append(cells, clusterRate(rate, err, prev[j], i))
			prev[j] = rate
		}
		grid = append(grid, cells)
	}
	if markdown {
		writeMarkdown(w, grid)
	} else {
		writePlain(w, grid)
	}
}

func orNoEtcd(u string) string {
	if u == "" {
		return "(none: -etcd URL)"
	}
	return u
}

// clusterRate is a cell's rate and, below the first row, its ratio to the
// row above (etcd against in-process locks, 2 daemons against 1).
func clusterRate(rate float64, err error, above float64, row int) string {
	switch {
	case err != nil:
		return "error: " + err.Error()
	case row == 0 || above == 0:
		return fmt.Sprintf("%.0f", rate)
	}
	return fmt.Sprintf("%.0f (%.2fx)", rate, rate/above)
}

// clusterCell is the commits (or increments) per second of column c in
// configuration r.
func clusterCell(dir, etcdURL string, r clusterRow, c clusterCol, n int) (float64, error) {
	mnts, stop, err := clusterMounts(dir, etcdURL, r)
	if err != nil {
		return 0, err
	}
	defer stop()
	start := time.Now()
	if err := c.run(mnts, n); err != nil {
		return 0, err
	}
	return float64(clusterWriters*n) / time.Since(start).Seconds(), nil
}

// clusterMounts mounts one fresh BACKING r.daemons times, in-process.
func clusterMounts(dir, etcdURL string, r clusterRow) (mnts []string, stop func(), err error) {
	if r.etcd && etcdURL == "" {
		return nil, nil, fmt.Errorf("no etcd (-etcd URL)")
	}
	root, err := os.MkdirTemp(dir, "safefs-bench-cluster-")
	if err != nil {
		return nil, nil, err
	}
	var srvs []*safefs.Server
	var conns []*cluster.Conn
	stop = func() {
		for _, s := range srvs {
			_ = s.Unmount()
		}
		for _, c := range conns {
			c.Close()
		}
		os.RemoveAll(root)
	}
	backing := filepath.Join(root, "backing")
	if err := os.Mkdir(backing, 0o755); err != nil {
		stop()
		return nil, nil, err
	}
	name := filepath.Base(root) // a fresh key prefix per cell
	for i := range r.daemons {
		o := safefs.DefaultOptions()
		if r.etcd {
			cfg := cluster.Config{Endpoints: []string{etcdURL}, Name: name, Node: fmt.Sprintf("n%d", i), LeaseTTL: cluster.DefaultLeaseTTL}
			c, err := cluster.Connect(context.Background(), cfg, zap.NewNop())
			if err != nil {
				stop()
				return nil, nil, err
			}
			conns = append(conns, c)
			cacheDirect(&o)
			o.Cluster = c
			// Scripts' locks through etcd too, as the daemon has them.
			o.ScriptLocks = etcdlock.NewEtcd(c.Client(), c.Prefix(), c.Session().Lease(), cfg.Node, c.Config().RetryFor)
		}
		mnt := filepath.Join(root, fmt.Sprintf("mnt%d", i))
		if err := os.Mkdir(mnt, 0o755); err != nil {
			stop()
			return nil, nil, err
		}
		s, err := safefs.Mount(backing, mnt, o)
		if err != nil {
			stop()
			return nil, nil, err
		}
		srvs = append(srvs, s)
		mnts = append(mnts, mnt)
	}
	return mnts, stop, nil
}

// writers runs clusterWriters goroutines, spread over the mounts.
func writers(mnts []string, f func(mnt string, i int) error) error {
	var wg sync.WaitGroup
	errs := make([]error, clusterWriters)
	for i := range clusterWriters {
		wg.Go(func() { errs[i] = f(mnts[i%len(mnts)], i) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func rewriteOwn(mnts []string, n int) error {
	data := pattern(4096)
	return writers(mnts, func(mnt string, i int) error {
		p := filepath.Join(mnt, fmt.Sprintf("own%d", i))
		for range n {
			if err := writeFile(p, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC, data); err != nil {
				return err
			}
		}
		return nil
	})
}

func appendShared(mnts []string, n int) error {
	data := pattern(100)
	return writers(mnts, func(mnt string, _ int) error {
		p := filepath.Join(mnt, "shared.log")
		for range n {
			if err := writeFile(p, unix.O_WRONLY|unix.O_CREAT|unix.O_APPEND, data); err != nil {
				return err
			}
		}
		return nil
	})
}

// carefulCounters runs clusterWriters Perl processes of the careful
// counter (flockCounter: open +<, flock, read, seek, truncate, print,
// close) on one file, spread over the mounts (2 hosts x 2 processes
// against 1 host x 4), and checks that the count is exact.
func carefulCounters(mnts []string, n int) error {
	if err := os.WriteFile(filepath.Join(mnts[0], "count"), []byte("0\n"), 0o644); err != nil {
		return err
	}
	err := writers(mnts, func(mnt string, _ int) error {
		out, err := exec.Command("perl", "-e", flockCounter, filepath.Join(mnt, "count"), strconv.Itoa(n), "inplace").CombinedOutput()
		if err != nil {
			return fmt.Errorf("careful counter: %w: %s", err, out)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return checkCount(filepath.Join(mnts[0], "count"), clusterWriters*n)
}
