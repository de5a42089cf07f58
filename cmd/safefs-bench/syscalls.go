package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// Each FUSE target is served by a child process (this program again,
// with daemonEnv naming the target): a daemon of its own, as its users
// run it, whose system calls strace can count apart from the workload's.
const daemonEnv = "SAFEFS_BENCH_DAEMON"

// childLimit bounds the waits for the child daemon and strace; it only
// guards against a hang.
const childLimit = 30 * time.Second

// childMain serves as the child daemon when daemonEnv says so, and
// reports whether it did.
func childMain() bool {
	name := os.Getenv(daemonEnv)
	if name == "" || len(os.Args) != 3 {
		return false
	}
	if err := serveChild(name, os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintf(os.Stderr, "safefs-bench daemon %s: %v\n", name, err)
		os.Exit(1)
	}
	return true
}

// serveChild is the child daemon: mount target name of raw on dir, say
// "ready" on stdout, serve until SIGTERM or SIGINT, unmount. SIGUSR1
// collects garbage and returns it to the system, then says "freed": the
// memory row tells live memory from garbage with it.
func serveChild(name, raw, dir string) error {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1)
	log, err := zap.NewDevelopment(zap.IncreaseLevel(zap.WarnLevel))
	if err != nil {
		return err
	}
	unmount, err := mountTarget(name, raw, dir, log)
	if err != nil {
		return err
	}
	fmt.Println("ready")
	for sig := range sigs {
		if sig == syscall.SIGUSR1 {
			debug.FreeOSMemory()
			fmt.Println("freed")
			continue
		}
		if err = unmount(); err == nil {
			return nil
		}
	}
	return err
}

// mountChild starts the child daemon for target name and returns its
// unmount and its pid once it serves.
func mountChild(name, raw, dir string) (func() error, int, error) {
	c, err := startChild(name, raw, dir)
	if err != nil {
		return nil, 0, err
	}
	return c.stop, c.pid, nil
}

// child is a child daemon that serves.
type child struct {
	pid   int
	stop  func() error  // unmount and wait for the child's exit
	freed chan struct{} // a "freed" line (freeMemory)
}

// freeMemory has the child collect its garbage and waits until it has.
func (c *child) freeMemory() error {
	if err := syscall.Kill(c.pid, syscall.SIGUSR1); err != nil {
		return err
	}
	select {
	case <-c.freed:
		return nil
	case <-time.After(childLimit):
		return fmt.Errorf("daemon %d: no \"freed\" after %v", c.pid, childLimit)
	}
}

func startChild(name, raw, dir string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, raw, dir)
	cmd.Env = append(os.Environ(), daemonEnv+"="+name)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop := func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		return cmd.Wait()
	}
	if err := waitLine(out, "ready"); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("mount %s in a child: %w", name, err)
	}
	c := &child{pid: cmd.Process.Pid, stop: stop, freed: make(chan struct{}, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "freed" {
				select {
				case c.freed <- struct{}{}:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	return c, nil
}

// waitLine reads r until a line containing want, within childLimit.
func waitLine(r io.Reader, want string) error {
	found := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if strings.Contains(sc.Text(), want) {
				found <- nil
				return
			}
		}
		found <- fmt.Errorf("ended before %q (%v)", want, sc.Err())
	}()
	select {
	case err := <-found:
		return err
	case <-time.After(childLimit):
		return fmt.Errorf("no %q after %v", want, childLimit)
	}
}

// counts is system calls by name over one traced run.
type counts map[string]int64

// traceCounts runs fn with every thread of process pid under
// `strace -c -f` and returns what the calls counted.
func traceCounts(pid int, fn func() error) (counts, error) {
	f, err := os.CreateTemp("", "safefs-bench-strace-")
	if err != nil {
		return nil, err
	}
	f.Close()
	defer os.Remove(f.Name())
	cmd := exec.Command("strace", "-c", "-f", "-U", "name,calls", "-o", f.Name(), "-p", strconv.Itoa(pid))
	errOut, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("strace: %w", err)
	}
	if err := waitLine(errOut, "attached"); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("strace -p %d: %w", pid, err)
	}
	go func() { _, _ = io.Copy(io.Discard, errOut) }()
	runErr := fn()
	_ = cmd.Process.Signal(syscall.SIGINT) // detach and write the summary
	if err := cmd.Wait(); err != nil && runErr == nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			return nil, err
		}
	}
	if runErr != nil {
		return nil, runErr
	}
	b, err := os.ReadFile(f.Name())
	if err != nil {
		return nil, err
	}
	return parseCounts(string(b))
}

// parseCounts reads `strace -c -U name,calls` output.
func parseCounts(s string) (counts, error) {
	c := counts{}
	for _, l := range strings.Split(s, "\n") {
		fs := strings.Fields(l)
		if len(fs) != 2 || fs[0] == "syscall" || fs[0] == "total" || strings.HasPrefix(fs[0], "-") {
			continue
		}
		n, err := strconv.ParseInt(fs[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("strace summary line %q: %w", l, err)
		}
		c[fs[0]] += n
	}
	if len(c) == 0 {
		return nil, fmt.Errorf("no system calls in the strace summary:\n%s", s)
	}
	return c, nil
}

// runtimeCalls are the Go runtime's own (scheduler, timers, preemption,
// memory): they depend on time spent, which strace stretches, not on
// the work done, so the per-commit figure leaves them out.
var runtimeCalls = map[string]bool{
	"nanosleep": true, "futex": true, "sched_yield": true, "getpid": true, "gettid": true,
	"tgkill": true, "rt_sigreturn": true, "rt_sigprocmask": true, "sigaltstack": true,
	"epoll_pwait": true, "madvise": true, "mmap": true, "munmap": true, "clone": true, "clone3": true,
}

// fileCalls counts the calls that are not the runtime's own.
func (c counts) fileCalls() int64 {
	var n int64
	for k, v := range c {
		if !runtimeCalls[k] {
			n += v
		}
	}
	return n
}

// syncs counts the calls that make data durable.
func (c counts) syncs() int64 {
	return c["fsync"] + c["fdatasync"] + c["sync_file_range"] + c["syncfs"]
}

// top lists the n most frequent calls, per commit, most frequent first.
func (c counts) top(n int, commits float64) string {
	names := make([]string, 0, len(c))
	for k := range c {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		if c[names[i]] != c[names[j]] {
			return c[names[i]] > c[names[j]]
		}
		return names[i] < names[j]
	})
	var parts []string
	for _, k := range names[:min(n, len(names))] {
		parts = append(parts, fmt.Sprintf("%s %.1f", k, float64(c[k])/commits))
	}
	return strings.Join(parts, ", ")
}

// writeCounts prints -syscalls' table: per commit, the system calls and
// the fsyncs (fsync and fdatasync) of each counted target, then the
// calls that make them up.
func writeCounts(w io.Writer, ws []workload, ts []*target, res map[string]map[string]result, markdown bool) {
	var counted []*target
	for _, t := range ts {
		if t.pid != 0 {
			counted = append(counted, t)
		}
	}
	legend := "\ncalls: all but the Go runtime's own (futex, nanosleep, ...: they follow time, which strace stretches);\n" +
		"fsyncs: fsync and fdatasync. All calls per commit, most frequent first (FUSE targets: the daemon; byhand: the bench):"
	writeCommitTable(w, "per commit (strace -c)", ws, counted, markdown, legend, func(wl workload, t *target) (string, string) {
		r := res[wl.name][t.name]
		switch {
		case r.callsErr != nil:
			return errCell(r.callsErr), ""
		case r.calls == nil || r.commits <= 0:
			return "-", ""
		}
		return fmt.Sprintf("%.1f calls, %.1f fsyncs", float64(r.calls.fileCalls())/r.commits, float64(r.calls.syncs())/r.commits),
			r.calls.top(16, r.commits)
	})
}
