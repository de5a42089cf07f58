// Command safefs-bench runs the same workloads on a plain directory, a
// go-fuse loopback mount and safefs (durability full and none), and prints
// each figure with its ratio to the plain directory's.
//
//	go run ./cmd/safefs-bench -quick            # smoke run
//	go run ./cmd/safefs-bench -markdown         # table for docs/benchmarks.md
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"
)

func main() {
	if childMain() {
		return
	}
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(os.Stderr, "safefs-bench: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fl := flag.NewFlagSet("safefs-bench", flag.ContinueOnError)
	fl.SetOutput(stderr)
	var names []string
	for _, w := range workloads {
		names = append(names, w.name)
	}
	targetsFlag := fl.String("targets", strings.Join(targetNames, ","), "targets to compare, comma separated")
	workloadsFlag := fl.String("workloads", strings.Join(names, ","), "workloads to run, comma separated")
	dir := fl.String("dir", os.TempDir(), "directory under which each target gets its fresh directory")
	quick := fl.Bool("quick", false, "divide every count and size by 10 (smoke run)")
	markdown := fl.Bool("markdown", false, "print a markdown table")
	verbose := fl.Bool("v", false, "log progress to stderr")
	fuseTrace := fl.Bool("fusetrace", false, "also time each FUSE request of the commit rows as the caller waits for it (the kernel's tracepoints fuse:fuse_request_send/end; root, tracefs), in a second untimed run: requests per commit and median latency by kind")
	syscalls := fl.Bool("syscalls", false, "also count system calls and fsyncs per commit (strace -c) of the commit rows, in a second untimed run: of each FUSE target's daemon, and of this process for byhand")
	cfg := config{seqSize: 1 << 30, mmapSize: 64 << 20, memSize: 1 << 30}
	fl.IntVar(&cfg.createN, "create-n", 2000, "create-4k: files to create")
	fl.IntVar(&cfg.rewriteN, "rewrite-n", 2000, "rewrite-4k: rewrites of the file")
	fl.Var((*sizeFlag)(&cfg.seqSize), "seq-size", "seq-write, seq-read-*: file size (suffix K, M, G)")
	fl.Var((*sizeFlag)(&cfg.mmapSize), "mmap-size", "mmap-read: file size (suffix K, M, G)")
	fl.IntVar(&cfg.appendN, "append-n", 2000, "append-1m, append-1g: 100-byte appends")
	fl.IntVar(&cfg.statN, "stat-n", 2000, "stat: files to stat")
	fl.IntVar(&cfg.statPasses, "stat-passes", 5, "stat: timed passes over the files")
	fl.IntVar(&cfg.readN, "read-n", 3000, "read-64k: whole-file reads of a 64 KiB file")
	fl.IntVar(&cfg.readPasses, "read-passes", 4, "seq-read-*: timed reads of the file (the cold row drops the page cache before each)")
	fl.IntVar(&cfg.counterProcs, "counter-procs", 16, "naive-counter: processes at once")
	fl.IntVar(&cfg.counterRuns, "counter-runs", 400, "naive-counter: increments per process")
	fl.IntVar(&cfg.flockProcs, "flock-procs", 8, "flock-counter: processes at once")
	fl.IntVar(&cfg.flockRuns, "flock-runs", 100, "flock-counter: commits per process")
	fl.IntVar(&cfg.writersN, "writers-n", 2000, "writers-1, -4, -16: commits in all, shared among the writers")
	fl.IntVar(&cfg.memFiles, "memory-files", 10000, "memory: files created through the daemon")
	fl.Var((*sizeFlag)(&cfg.memSize), "memory-size", "memory: bytes written through one handle (suffix K, M, G)")
	fl.IntVar(&cfg.apacheN, "apache-n", 20000, "apache: requests")
	fl.DurationVar(&cfg.apachePause, "apache-pause", 0, "apache: rewriter's pause after each rewrite (0: continuous)")
	fl.IntVar(&cfg.cgiN, "cgi-n", 2000, "cgi-php-flock: requests")
	fl.IntVar(&cfg.guestbookN, "guestbook-n", 3000, "guestbook-page: fetches of the page while 32 clients post")
	fl.IntVar(&cfg.servletRuns, "servlet-runs", 25, "servlet: requests per thread (8 threads)")
	fl.IntVar(&cfg.viewsN, "views-n", 160, "cgi-views: views")
	fl.IntVar(&cfg.bbsN, "bbs-n", 400, "cgi-bbs: requests (one POST in ten)")
	fl.IntVar(&cfg.sqliteProcs, "sqlite-procs", 8, "sqlite-wal: processes at once")
	fl.IntVar(&cfg.sqliteRuns, "sqlite-runs", 500, "sqlite-wal: transactions per process")
	etcdURL := fl.String("etcd", "", "with -cluster: the etcd (URL) the safefs-etcd rows lock through")
	clusterTable := fl.Bool("cluster", false, "print only the cluster table: commits/s with in-process and etcd locks, 1 and 2 daemons")
	clusterN := fl.Int("cluster-n", 200, "-cluster: commits per writer per cell")
	apps := appsFlags(fl)
	cpuProfile := fl.String("cpuprofile", "", "write this process's CPU profile (the workloads' side: each FUSE target is served by a process of its own) to this file")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		stop, err := startProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	if *clusterTable {
		clusterBench(stdout, *dir, *etcdURL, *clusterN, *markdown)
		return nil
	}
	if fl.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fl.Args())
	}
	if *quick {
		cfg.shrink()
		apps.shrink()
	}
	if !cfg.valid() {
		return errors.New("counts and sizes must be positive")
	}
	tnames, err := pick(*targetsFlag, targetNames)
	if err != nil {
		return fmt.Errorf("-targets: %w", err)
	}
	wnames, err := pick(*workloadsFlag, names)
	if err != nil {
		return fmt.Errorf("-workloads: %w", err)
	}
	var ws []workload
	for _, w := range workloads {
		if slices.Contains(wnames, w.name) {
			ws = append(ws, w)
		}
	}
	log := zap.NewNop()
	if *verbose {
		enc := zap.NewDevelopmentEncoderConfig()
		log = zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.Lock(zapcore.AddSync(stderr)), zap.InfoLevel))
	}
	if apps.apps || apps.soak {
		return runApps(log, stdout, stderr, *dir, tnames, isSet(fl, "targets"), apps, *fuseTrace, *markdown)
	}
	cfg.syscalls = *syscalls
	cfg.fuseTrace = *fuseTrace
	return bench(log, stdout, stderr, *dir, tnames, ws, cfg, *markdown)
}

// unsafeLoss: the naive counter torn on a target without safefs is the
// loss the row exists to show, a result ("torn"), not a failed run.
func unsafeLoss(w workload, t *target, err error) bool {
	return (w.name == "naive-counter" || w.name == "servlet") && !isSafefs(t.name) && errors.Is(err, errTorn)
}

// bench mounts the targets, runs every workload on every target in turn
// and prints the table. Mounts are undone on return, including after
// SIGINT or SIGTERM, which stop the running workload at its next operation.
func bench(log *zap.Logger, stdout, stderr io.Writer, dir string, tnames []string, ws []workload, cfg config, markdown bool) (err error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()

	var ts []*target
	defer func() {
		log.Info("unmounting")
		err = errors.Join(err, closeAll(ts))
	}()
	for _, name := range tnames {
		t, err := newTarget(name, dir, log)
		if err != nil {
			return err
		}
		ts = append(ts, t)
	}

	printFacts(stdout, dir, cfg, markdown)
	res := map[string]map[string]result{}
	dropped, failed := true, 0
	for _, w := range ws {
		res[w.name] = map[string]result{}
		for _, t := range ts {
			if ctx.Err() != nil {
				break
			}
			log.Info("running", zap.String("workload", w.name), zap.String("target", t.name))
			r, ok := runOne(ctx, w, t, cfg, nil)
			dropped = dropped && ok
			if ctx.Err() != nil {
				r.ran = false // cut short: shown as "-"
			} else if r.err != nil && !unsafeLoss(w, t, r.err) {
				if !errors.Is(r.err, errNoApache) && !errors.Is(r.err, errNoJava) { // an optional tool: shown, not a failure
					failed++
				}
				fmt.Fprintf(stderr, "safefs-bench: %s on %s: %v\n", w.name, t.name, r.err)
			}
			log.Info("done", zap.String("workload", w.name), zap.String("target", t.name), zap.Float64(w.unit, r.value))
			watched := r.err == nil && r.ran && w.commits
			if watched && cfg.syscalls && t.pid != 0 {
				r.commits, r.callsErr = rerun(ctx, log, stderr, "counting", w, t, cfg, func(fn func() error) (err error) {
					r.calls, err = traceCounts(t.pid, fn)
					return err
				})
			}
			if watched && cfg.fuseTrace && t.unmount != nil {
				r.opsCommits, r.opsErr = rerun(ctx, log, stderr, "tracing", w, t, cfg, func(fn func() error) (err error) {
					r.ops, err = traceFUSE(t.dir, fn)
					return err
				})
			}
			res[w.name][t.name] = r
		}
	}
	writeTable(stdout, ws, tnames, res, cfg, markdown)
	if cfg.syscalls {
		writeCounts(stdout, ws, ts, res, markdown)
	}
	if cfg.fuseTrace {
		writeFUSETrace(stdout, ws, ts, res, markdown)
	}
	if !dropped {
		fmt.Fprintln(stdout, "\nnote: could not drop the page cache (needs root and a writable /proc/sys/vm/drop_caches): the cold rows may be served from memory")
	}
	if ctx.Err() != nil {
		return errors.New("interrupted")
	}
	if failed > 0 {
		return fmt.Errorf("%d of the runs failed", failed)
	}
	return nil
}

// rerun runs w on t again, untimed, inside watch (what: "counting",
// "tracing"), and returns the commits it made; a failure is also
// printed on stderr.
func rerun(ctx context.Context, log *zap.Logger, stderr io.Writer, what string, w workload, t *target, cfg config, watch func(func() error) error) (float64, error) {
	log.Info(what, zap.String("workload", w.name), zap.String("target", t.name))
	c, _ := runOne(ctx, w, t, cfg, watch)
	if c.err != nil {
		fmt.Fprintf(stderr, "safefs-bench: %s %s on %s: %v\n", what, w.name, t.name, c.err)
	}
	return c.value, c.err
}

// runOne runs w on t in a fresh directory named after w, and removes it
// afterwards. ok is false if w wants a cold cache and it could not be dropped.
// With watch, the run is not timed but made inside watch (strace, FUSE
// tracepoints), and its value is the count of what it did.
func runOne(ctx context.Context, w workload, t *target, cfg config, watch func(func() error) error) (r result, ok bool) {
	if t.byHand && !w.commits || w.safefsOnly && !isSafefs(t.name) {
		return r, true // no form for this target: shown as "-"
	}
	e := &env{ctx: ctx, dir: filepath.Join(t.dir, w.name), raw: filepath.Join(t.raw, w.name), root: t.root,
		target: t.name, cfg: cfg, byHand: t.byHand}
	// Remove through the mount: safefs (at this version) can mistake a file
	// made in BACKING for one removed behind its back that had the same inode number.
	defer func() {
		if err := os.RemoveAll(e.dir); err != nil && r.err == nil {
			r.err = fmt.Errorf("cleanup: %w", err)
		}
	}()
	r.ran, ok = true, true
	if r.err = os.Mkdir(e.raw, 0o755); r.err != nil {
		return r, ok
	}
	if w.setup != nil {
		if r.err = w.setup(e); r.err != nil {
			return r, ok
		}
	}
	syncFS(e.raw)
	if w.cold {
		ok = dropCaches()
	}
	if watch != nil {
		r.err = watch(func() error {
			var err error
			r.value, err = w.run(e)
			return err
		})
		return r, ok
	}
	start := time.Now()
	n, err := w.run(e)
	r.value, r.err, r.extra = n, err, e.extra
	if w.total == nil && !w.text {
		r.value = n / cmp.Or(e.secs, time.Since(start).Seconds())
	}
	return r, ok
}

// pick splits a comma list and checks every name is known.
func pick(list string, known []string) ([]string, error) {
	var out []string
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if !slices.Contains(known, s) {
			return nil, fmt.Errorf("unknown %q (want some of %s)", s, strings.Join(known, ","))
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}

func printFacts(w io.Writer, dir string, cfg config, markdown bool) {
	var u unix.Utsname
	unix.Uname(&u)
	fsType := "unknown file system"
	var free uint64
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) == nil {
		fsType = fsName(st.Type)
		free = st.Bavail * uint64(st.Bsize)
	}
	lines := []string{
		"date:   " + time.Now().Format("2006-01-02 15:04:05 MST"),
		fmt.Sprintf("kernel: %s %s, %d CPUs, %s", unix.ByteSliceToString(u.Release[:]), unix.ByteSliceToString(u.Machine[:]), runtime.NumCPU(), runtime.Version()),
		fmt.Sprintf("dir:    %s (%s, %s free)", dir, fsType, sizeFlag(free)),
		fmt.Sprintf("sizes:  create-4k %d files, rewrite-4k %d commits, seq %s in 1 MiB I/Os (reads x %d), mmap %s, append %d x 100 B, stat %d files x %d, counter %d x %d, apache %d requests (rewriter pause %v)",
			cfg.createN, cfg.rewriteN, sizeFlag(cfg.seqSize), cfg.readPasses, sizeFlag(cfg.mmapSize), cfg.appendN, cfg.statN, cfg.statPasses, cfg.counterProcs, cfg.counterRuns, cfg.apacheN, cfg.apachePause),
		fmt.Sprintf("        flock-counter %d x %d, writers-K %d commits in all, memory %d files then %s through one handle, read-64k %d reads, sqlite-wal %d x %d",
			cfg.flockProcs, cfg.flockRuns, cfg.writersN, cfg.memFiles, sizeFlag(cfg.memSize), cfg.readN, cfg.sqliteProcs, cfg.sqliteRuns),
		"cells:  figure (ratio to backing, ratio to loopback, and in the commit rows to byhand: the durable atomic write by hand)",
	}
	for _, l := range lines {
		if markdown {
			l = "- " + l
		}
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w)
}

func fsName(magic int64) string {
	names := map[int64]string{
		0xEF53: "ext4", 0x58465342: "xfs", 0x9123683E: "btrfs", 0x01021994: "tmpfs",
		0x794C7630: "overlayfs", 0x2FC12FC1: "zfs", 0xF2F52010: "f2fs", 0x6969: "nfs",
		0x65735546: "fuse", 0xFF534D42: "cifs", 0x01021997: "9p",
	}
	if n, ok := names[magic]; ok {
		return n
	}
	return fmt.Sprintf("fs type %#x", magic)
}

// sizeFlag is a byte count written with an optional K, M or G (binary) suffix.
type sizeFlag int64

func (s sizeFlag) String() string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if s >= 1<<u.shift {
			v := strconv.FormatFloat(float64(s)/float64(int64(1)<<u.shift), 'f', 1, 64)
			return strings.TrimSuffix(v, ".0") + " " + u.name
		}
	}
	return strconv.FormatInt(int64(s), 10) + " B"
}

func (s *sizeFlag) Set(v string) error {
	shift := 0
	t := strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(v), "B"), "I")
	if t != "" {
		switch t[len(t)-1] {
		case 'K':
			shift = 10
		case 'M':
			shift = 20
		case 'G':
			shift = 30
		}
		if shift > 0 {
			t = t[:len(t)-1]
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)>>shift {
		return fmt.Errorf("bad size %q", v)
	}
	*s = sizeFlag(n << shift)
	return nil
}

// startProfile starts a CPU profile into path; stop ends it.
func startProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
