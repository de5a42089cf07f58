package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const chunk = 1 << 20 // seq-write and seq-read do 1 MiB writes and reads

// config holds the sizes and counts of the workloads.
type config struct {
	createN      int           // create-4k files
	rewriteN     int           // rewrite-4k commits
	seqSize      int64         // seq-write and seq-read-* bytes
	appendN      int           // appends per append-* workload
	statN        int           // stat: files
	statPasses   int           // stat: timed passes over them
	readN        int           // read-64k: whole-file reads
	readPasses   int           // seq-read-*: timed reads of the file
	mmapSize     int64         // mmap-read bytes
	counterProcs int           // naive-counter processes
	counterRuns  int           // naive-counter increments per process
	apacheN      int           // apache requests
	apachePause  time.Duration // apache: rewriter's pause after each rewrite
	cgiN         int           // cgi-php-flock requests
	guestbookN   int           // guestbook-page: fetches of the page
	servletRuns  int           // servlet: requests per thread
	viewsN       int           // cgi-views: views
	bbsN         int           // cgi-bbs: requests
	sqliteProcs  int           // sqlite-wal processes
	sqliteRuns   int           // sqlite-wal transactions per process
	flockProcs   int           // flock-counter processes
	flockRuns    int           // flock-counter commits per process
	writersN     int           // writers-K: commits in all, shared among the K writers
	memFiles     int           // memory: files created
	memSize      int64         // memory: bytes written through one handle
	syscalls     bool          // -syscalls: count the commit rows' system calls too
	fuseTrace    bool          // -fusetrace: time the commit rows' FUSE requests too
}

func (c config) valid() bool {
	for _, n := range []int64{int64(c.createN), int64(c.rewriteN), int64(c.appendN), int64(c.statN),
		int64(c.statPasses), int64(c.readN), int64(c.readPasses), int64(c.counterProcs), int64(c.counterRuns), int64(c.apacheN), int64(c.cgiN), int64(c.guestbookN), int64(c.servletRuns), int64(c.viewsN), int64(c.bbsN), c.seqSize, c.mmapSize,
		int64(c.flockProcs), int64(c.flockRuns), int64(c.writersN), int64(c.memFiles), c.memSize, int64(c.sqliteProcs), int64(c.sqliteRuns)} {
		if n < 1 {
			return false
		}
	}
	return true
}

// shrink divides every count and size by 10, for smoke runs. The counters
// keep their processes: with fewer there is little race to measure.
func (c *config) shrink() {
	for _, n := range []*int{&c.createN, &c.rewriteN, &c.appendN, &c.statN, &c.readN, &c.counterRuns, &c.apacheN, &c.cgiN, &c.guestbookN, &c.servletRuns, &c.viewsN, &c.bbsN,
		&c.flockRuns, &c.writersN, &c.memFiles, &c.sqliteRuns} {
		*n = max(*n/10, 1)
	}
	c.seqSize = max(c.seqSize/10/chunk*chunk, chunk)
	c.memSize = max(c.memSize/10/chunk*chunk, chunk)
	c.mmapSize = max(c.mmapSize/10/pageSize*pageSize, pageSize)
}

// env is where one workload runs on one target: dir through the target
// (timed part), raw the same directory in the target's backing directory
// (untimed setup, which so stays cheap even on safefs with durability=full).
type env struct {
	ctx      context.Context
	dir, raw string
	root     string // the target's own directory, outside its mount and backing directory
	target   string // the target's name
	cfg      config
	byHand   bool    // commits are made durably by hand (byHandTarget)
	extra    string  // the cell of the workload's extra row, if it has one
	secs     float64 // if set by run: its timed part (apache leaves out Apache's start)
}

// workload: main runs setup, syncs, drops the page cache when cold, then
// times run, which returns how many units it did.
type workload struct {
	name  string
	unit  string // of run's result per second
	cold  bool
	setup func(e *env) error
	run   func(e *env) (float64, error)
	// Rows that are not rates: run's result is a count out of total(cfg),
	// not divided by the time, and title(cfg) labels the row.
	total func(c config) float64
	title func(c config) string
	// commits: each unit is one commit (open, write, close): the row has
	// a by-hand form and -syscalls counts it.
	commits bool
	// extra titles a second row that the same run fills (env.extra).
	extra func(c config) string
	// safefsOnly rows run only on the safefs targets ("-" elsewhere).
	safefsOnly bool
	// text rows show env.extra as their cell: no rate, no ratios.
	text bool
	// anchor: a target whose figure the cells are also compared with.
	anchor string
}

var workloads = []workload{
	{name: "create-4k", unit: "files/s", run: create4k, commits: true},
	{name: "rewrite-4k", unit: "commits/s", setup: rewriteSetup, run: rewrite4k, commits: true},
	{name: "seq-write", unit: "MB/s", setup: warmMemory, run: seqWrite},
	{name: "seq-rewrite", unit: "MB/s", setup: seqRewriteSetup, run: seqWrite},
	{name: "seq-read-cold", unit: "MB/s", cold: true, setup: seqReadSetup, run: seqReadCold},
	{name: "seq-read-warm", unit: "MB/s", setup: seqReadWarmSetup, run: seqReadWarm},
	{name: "mmap-read", unit: "MB/s", setup: mmapSetup, run: mmapRead},
	{name: "append-1m", unit: "ops/s", setup: appendSetup(1 << 20), run: appendRun(1 << 20), commits: true},
	{name: "append-1g", unit: "ops/s", setup: appendSetup(1 << 30), run: appendRun(1 << 30), commits: true},
	{name: "stat", unit: "ops/s", setup: statSetup, run: statRun},
	{name: "stat-www", unit: "ops/s", setup: statSetup, run: statWWW},
	{name: "read-64k", unit: "reads/s", setup: read64kSetup, run: read64k},
	{name: "naive-counter", unit: "kept", setup: counterSetup, run: counterRun, total: counterTotal, title: counterTitle},
	{name: "flock-counter", unit: "commits/s", setup: counterSetup, run: flockRun, commits: true},
	writersRow(1),
	writersRow(4),
	writersRow(16),
	{name: "memory", unit: "MiB", run: memoryRun, safefsOnly: true, text: true},
	{name: "apache", unit: "req/s", setup: apacheSetup, run: apacheRun, extra: apacheCutTitle},
	{name: "cgi-php-flock", unit: "req/s", setup: cgiSetup, run: cgiRun},
	{name: "guestbook-page", unit: "posts/s", setup: guestbookSetup, run: guestbookRun, extra: guestbookCutTitle},
	{name: "servlet", unit: "kept", setup: servletSetup, run: servletRun, total: servletTotal, title: servletTitle, extra: servletTimeTitle},
	{name: "cgi-views", unit: "views/s", setup: bbsSetup, run: viewsRun, title: viewsTitle, anchor: "safefs-rmw-off"},
	{name: "cgi-bbs", unit: "req/s", setup: bbsSetup, run: mixedRun, title: mixedTitle, extra: mixedPostsTitle, anchor: "safefs-rmw-off"},
	{name: "sqlite-wal", unit: "tx/s", setup: sqliteSetup, run: sqliteRun},
}

var block4k = pattern(4096)

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}

func create4k(e *env) (float64, error) {
	for i := range e.cfg.createN {
		if err := e.ctx.Err(); err != nil {
			return 0, err
		}
		if err := e.commit(fmt.Sprintf("f%06d", i), unix.O_CREAT|unix.O_EXCL, block4k); err != nil {
			return 0, err
		}
	}
	return float64(e.cfg.createN), nil
}

func rewriteSetup(e *env) error {
	return writeFile(filepath.Join(e.raw, "f"), unix.O_CREAT, block4k)
}

func rewrite4k(e *env) (float64, error) {
	for range e.cfg.rewriteN {
		if err := e.ctx.Err(); err != nil {
			return 0, err
		}
		if err := e.commit("f", unix.O_TRUNC, block4k); err != nil {
			return 0, err
		}
	}
	return float64(e.cfg.rewriteN), nil
}

// writeSeq writes size bytes to path in chunks, then closes (which commits on safefs).
func writeSeq(ctx context.Context, path string, size int64) error {
	fd, err := retry(func() (int, error) {
		return unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
	})
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	buf := pattern(chunk)
	for off := int64(0); off < size && err == nil; off += chunk {
		if err = ctx.Err(); err == nil {
			err = writeAll(fd, buf[:min(size-off, chunk)])
		}
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func seqWrite(e *env) (float64, error) {
	return float64(e.cfg.seqSize) / 1e6, writeSeq(e.ctx, e.path("data"), e.cfg.seqSize)
}

// warmMemory writes and removes a scratch file of twice the size in the
// backing directory, untimed, so that the timed write lands in memory
// just freed whatever the target: on this VM, writing into memory the
// guest has not used lately runs at about 0.5 GB/s, into memory just
// freed at about 8 GB/s, and without this the row measured which target got freed memory.
func warmMemory(e *env) error {
	p := filepath.Join(e.raw, "scratch")
	if err := writeSeq(e.ctx, p, 2*e.cfg.seqSize); err != nil {
		return err
	}
	return os.Remove(p)
}

// seqRewriteSetup puts the file in the backing directory: the timed
// write truncates and rewrites it (passthrough=write's case).
func seqRewriteSetup(e *env) error {
	return writeSeq(e.ctx, filepath.Join(e.raw, "data"), e.cfg.seqSize)
}

// seqReadSetup writes the file through the target, so safefs reads a file
// it committed itself.
func seqReadSetup(e *env) error {
	return writeSeq(e.ctx, e.path("data"), e.cfg.seqSize)
}

// seqReadWarmSetup also reads the file once: the timed reads follow.
func seqReadWarmSetup(e *env) error {
	if err := seqReadSetup(e); err != nil {
		return err
	}
	_, err := seqRead(e)
	return err
}

// seqReadWarm and seqReadCold time cfg.readPasses whole reads of the
// file: one read of 512 MiB from memory lasts some 30 ms here, too short
// to tell a target from this shared machine's noise.
func seqReadWarm(e *env) (float64, error) { return seqReadPasses(e, false) }

// seqReadCold drops the page cache before each read (main dropped it
// before the first), outside the timed part.
func seqReadCold(e *env) (float64, error) { return seqReadPasses(e, true) }

func seqReadPasses(e *env, cold bool) (float64, error) {
	var mb, secs float64
	for i := range e.cfg.readPasses {
		if cold && i > 0 {
			dropCaches()
		}
		start := time.Now()
		n, err := seqRead(e)
		if err != nil {
			return 0, err
		}
		mb, secs = mb+n, secs+time.Since(start).Seconds()
	}
	e.secs = secs
	return mb, nil
}

func seqRead(e *env) (float64, error) {
	fd, err := retry(func() (int, error) { return unix.Open(e.path("data"), unix.O_RDONLY|unix.O_CLOEXEC, 0) })
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	buf := make([]byte, chunk)
	var total int64
	for {
		if err := e.ctx.Err(); err != nil {
			return 0, err
		}
		n, err := retry(func() (int, error) { return unix.Read(fd, buf) })
		if err != nil {
			return 0, err
		}
		if n == 0 {
			break
		}
		total += int64(n)
	}
	if total != e.cfg.seqSize {
		return 0, fmt.Errorf("read %d bytes, want %d", total, e.cfg.seqSize)
	}
	return float64(total) / 1e6, nil
}

// appendSetup makes a sparse log of the given size.
func appendSetup(size int64) func(e *env) error {
	return func(e *env) error {
		f, err := os.Create(filepath.Join(e.raw, "log"))
		if err != nil {
			return err
		}
		if err := f.Truncate(size); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
}

func appendRun(size int64) func(e *env) (float64, error) {
	return func(e *env) (float64, error) {
		rec := pattern(100)
		rec[99] = '\n'
		for range e.cfg.appendN {
			if err := e.ctx.Err(); err != nil {
				return 0, err
			}
			if err := e.commit("log", unix.O_APPEND, rec); err != nil {
				return 0, err
			}
		}
		var st unix.Stat_t
		if err := unix.Stat(e.path("log"), &st); err != nil {
			return 0, err
		}
		if want := size + int64(100*e.cfg.appendN); st.Size != want {
			return 0, fmt.Errorf("log is %d bytes after the appends, want %d", st.Size, want)
		}
		return float64(e.cfg.appendN), nil
	}
}

// statSetup creates the files in BACKING; statRun times all the passes,
// so the first one's lookups count, as measured (Perl's
// stat of 2000 files x 5). Stat by name, as Perl's stat and lstat do.
func statSetup(e *env) error {
	for i := range e.cfg.statN {
		if err := writeFile(filepath.Join(e.raw, fmt.Sprintf("f%06d", i)), unix.O_CREAT, nil); err != nil {
			return err
		}
	}
	return nil
}

func statRun(e *env) (float64, error) {
	for range e.cfg.statPasses {
		if err := statPass(e); err != nil {
			return 0, err
		}
	}
	return float64(e.cfg.statN * e.cfg.statPasses), nil
}

// statWWW is statRun as www-data, the web server's user, who owns
// neither the target's directory nor its files: the kernel then checks
// the directories' ACLs at each path walk.
func statWWW(e *env) (float64, error) {
	www, err := wwwData()
	if err != nil {
		return 0, err
	}
	type result struct {
		n   float64
		err error
	}
	done := make(chan result, 1)
	go func() {
		// Credentials set by raw system calls are the thread's own: this
		// one is never unlocked, so it ends with the goroutine.
		runtime.LockOSThread()
		if err := asUser(www); err != nil {
			done <- result{err: err}
			return
		}
		n, err := statRun(e)
		done <- result{n, err}
	}()
	r := <-done
	return r.n, r.err
}

// asUser gives the calling thread alone www's file system user, group
// and no supplementary groups.
func asUser(www *syscall.Credential) error {
	if err := unix.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := unix.Setfsgid(int(www.Gid)); err != nil {
		return fmt.Errorf("setfsgid: %w", err)
	}
	if err := unix.Setfsuid(int(www.Uid)); err != nil {
		return fmt.Errorf("setfsuid: %w", err)
	}
	return nil
}

func statPass(e *env) error {
	var st unix.Stat_t
	for i := range e.cfg.statN {
		if err := e.ctx.Err(); err != nil {
			return err
		}
		p := e.path(fmt.Sprintf("f%06d", i))
		if _, err := retry(func() (int, error) { return 0, unix.Stat(p, &st) }); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	return nil
}

// read64kSetup puts a 64 KiB data file in BACKING (made outside the
// mount, as a site's templates and data files are).
func read64kSetup(e *env) error {
	return writeFile(filepath.Join(e.raw, "tpl"), unix.O_CREAT, pattern(64<<10))
}

// read64k reads it whole readN times (open, read to the end in 8 KiB
// reads as Perl's and stdio's buffers do, close), as a CGI script reads
// a template or a data file nobody is writing.
func read64k(e *env) (float64, error) {
	p := e.path("tpl")
	for range e.cfg.readN {
		if err := e.ctx.Err(); err != nil {
			return 0, err
		}
		fd, err := retry(func() (int, error) { return unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0) })
		if err != nil {
			return 0, fmt.Errorf("%s: %w", p, err)
		}
		n, err := readAll8k(fd)
		unix.Close(fd)
		if err != nil || n != 64<<10 {
			return 0, fmt.Errorf("%s: read %d bytes (%v), want %d", p, n, err, 64<<10)
		}
	}
	return float64(e.cfg.readN), nil
}

// readAll8k reads fd to its end in 8 KiB reads and returns the length.
func readAll8k(fd int) (int, error) {
	var buf [8 << 10]byte
	total := 0
	for {
		n, err := retry(func() (int, error) { return unix.Read(fd, buf[:]) })
		if err != nil || n == 0 {
			return total, err
		}
		total += n
	}
}

func (e *env) path(name string) string { return filepath.Join(e.dir, name) }

// writeFile opens path write-only with the extra flags, writes data and
// closes: one commit on safefs.
func writeFile(path string, flags int, data []byte) error {
	fd, err := retry(func() (int, error) {
		return unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC|flags, 0o644)
	})
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	err = writeAll(fd, data)
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := retry(func() (int, error) { return unix.Write(fd, b) })
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		b = b[n:]
	}
	return nil
}

// retry repeats a system call interrupted by a signal, as package os does.
func retry[T any](f func() (T, error)) (T, error) {
	for {
		v, err := f()
		if err != unix.EINTR {
			return v, err
		}
	}
}

// dropCaches writes back dirty data and drops what the kernel lets go of
// (only possible as root); it reports whether the drop worked.
func dropCaches() bool {
	unix.Sync()
	if os.Geteuid() != 0 {
		return false
	}
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0) == nil
}
