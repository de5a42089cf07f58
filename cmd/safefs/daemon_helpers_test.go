package main

// Helpers that start, watch and stop the safefs daemon and the other
// subprocesses of the tests, and clean up their mounts.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/safefs/safefs/internal/mountinfo"
)

// crashEnv names the daemon's crash-point variable (see fs/root.go).
const crashEnv = "SAFEFS_CRASH_AT"

// waitLimit and mountLimit bound the waits for a process to exit or a
// mount to come up. They only guard against a hang; no assertion depends
// on them.
const (
	waitLimit  = 60 * time.Second
	mountLimit = 20 * time.Second
)

// requireFuse skips a FUSE test on a machine without /dev/fuse, except in
// CI, where a missing device is a broken runner and must fail loudly.
func requireFuse(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err == nil {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal("/dev/fuse is missing and CI is set: the FUSE tests must run in CI")
	}
	t.Skip("/dev/fuse is missing")
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("not root, and CI is set: CI runs the tests as root")
		}
		t.Skip("needs root to mount")
	}
}

// mountType returns the file system type of the mount at path in
// /proc/mounts, or ok=false if path is not a mount point.
func mountType(t *testing.T, path string) (fstype string, ok bool) {
	t.Helper()
	data, err := os.ReadFile("/proc/mounts")
	require.NoError(t, err)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 3 && mountinfo.Unescape(f[1]) == path {
			fstype, ok = f[2], true // the last one is the one on top
		}
	}
	return fstype, ok
}

// unmountIfMounted lazily detaches path, and only path, if a test left it
// mounted.
func unmountIfMounted(t *testing.T, path string) {
	t.Helper()
	if _, ok := mountType(t, path); !ok {
		return
	}
	if err := syscall.Unmount(path, syscall.MNT_DETACH); err != nil {
		t.Errorf("cleanup: unmount %s: %v", path, err)
	}
}

// lineBuffer keeps what a subprocess writes, safe for the writing
// subprocess and a reading test. onLine, if set, gets each complete line,
// with mu held.
type lineBuffer struct {
	mu     sync.Mutex
	all    bytes.Buffer
	part   []byte
	onLine func(string)
}

func (b *lineBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.all.Write(p)
	if b.onLine == nil {
		return len(p), nil
	}
	b.part = append(b.part, p...)
	for {
		i := bytes.IndexByte(b.part, '\n')
		if i < 0 {
			return len(p), nil
		}
		b.onLine(string(b.part[:i]))
		b.part = b.part[i+1:]
	}
}

func (b *lineBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.all.String()
}

// proc is a subprocess (the daemon, perl, strace) that the test may not
// wait for: its cleanup kills it, by its own pid only, and reaps it.
type proc struct {
	cmd     *exec.Cmd
	out     *lineBuffer // stdout and stderr, unless cmd has its own
	exited  chan struct{}
	waitErr error // valid once exited is closed
}

func startProc(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	p := launch(t, cmd, &lineBuffer{})
	t.Cleanup(func() { p.reap(t, waitLimit) })
	return p
}

// launch starts cmd; the caller registers the cleanup.
func launch(t *testing.T, cmd *exec.Cmd, out *lineBuffer) *proc {
	t.Helper()
	p := &proc{cmd: cmd, out: out, exited: make(chan struct{})}
	if cmd.Stdout == nil {
		cmd.Stdout = out
	}
	if cmd.Stderr == nil {
		cmd.Stderr = out
	}
	require.NoError(t, cmd.Start())
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p
}

// reap kills the process unless it has exited, and waits for it.
func (p *proc) reap(t *testing.T, limit time.Duration) {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.exited:
	case <-time.After(limit):
		// A process in uninterruptible sleep on a dead FUSE mount
		// cannot be reaped until the mount is gone.
		t.Errorf("cleanup: %s (pid %d) did not die", p.cmd.Path, p.cmd.Process.Pid)
	}
}

// waitExit waits for the process to exit.
func (p *proc) waitExit(t *testing.T, limit time.Duration) {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(limit):
		t.Fatalf("%s still running after %v; output:\n%s", p.cmd.Path, limit, p.out)
	}
}

// wait waits for the process to exit and returns its output.
func (p *proc) wait(t *testing.T) string {
	t.Helper()
	p.waitExit(t, waitLimit)
	return p.out.String()
}

// mountProc is a running `safefs mount`.
type mountProc struct {
	*proc
	mounted chan struct{} // closed at the "mounted" log line
}

// startMount starts `safefs mount backing mnt`, waits until it has
// mounted, and registers a cleanup that kills it and detaches mnt if it
// is still mounted.
func startMount(t *testing.T, backing, mnt string) *mountProc {
	t.Helper()
	p := launchMount(t, exec.Command(safefsBin, "mount", backing, mnt), mnt)
	p.waitMounted(t)
	return p
}

// launchMount starts cmd, a `safefs mount` of mnt, without waiting for
// the mount, with startMount's cleanup.
func launchMount(t *testing.T, cmd *exec.Cmd, mnt string) *mountProc {
	t.Helper()
	p := &mountProc{mounted: make(chan struct{})}
	var once sync.Once
	out := &lineBuffer{onLine: func(l string) {
		// Console format: time<TAB>level<TAB>message<TAB>fields.
		if strings.Contains(l, "\tmounted\t") {
			once.Do(func() { close(p.mounted) })
		}
	}}
	p.proc = launch(t, cmd, out)
	t.Cleanup(func() {
		p.reap(t, mountLimit)
		unmountIfMounted(t, mnt)
	})
	return p
}

// startMountWith is startMount with crashAt in the daemon's environment
// ("" for a normal daemon).
func startMountWith(t *testing.T, backing, mnt, crashAt string) *mountProc {
	t.Helper()
	t.Setenv(crashEnv, crashAt)
	p := startMount(t, backing, mnt)
	t.Setenv(crashEnv, "") // only the daemon gets the crash point
	return p
}

// waitMounted waits for the "mounted" log line.
func (p *mountProc) waitMounted(t *testing.T) {
	t.Helper()
	select {
	case <-p.mounted:
	case <-p.exited:
		t.Fatalf("safefs mount exited before mounting (%v); stderr:\n%s", p.waitErr, p.out)
	case <-time.After(mountLimit):
		kids := p.dumpStacks()
		t.Fatalf("no \"mounted\" line after %v; its children's kernel stacks:\n%s\nstderr (goroutines at the end):\n%s",
			mountLimit, kids, p.out)
	}
}

// dumpStacks tells what a hung daemon waits for: its children's kernel
// stacks (the self-test's shell, in a FUSE request), then SIGQUIT, which
// makes the Go runtime print every goroutine to stderr and exit.
func (p *mountProc) dumpStacks() string {
	var kids strings.Builder
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, st := range stats {
		b, err := os.ReadFile(st)
		// PID (COMM) STATE PPID ...
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if err != nil || len(f) < 2 || f[1] != strconv.Itoa(p.cmd.Process.Pid) {
			continue
		}
		dir := filepath.Dir(st)
		cmdline, _ := os.ReadFile(dir + "/cmdline")
		stack, _ := os.ReadFile(dir + "/stack")
		fmt.Fprintf(&kids, "%s %q:\n%s", dir, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}), stack)
	}
	_ = p.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
	}
	return kids.String()
}

// exitCode waits for the daemon to end and returns its exit code.
func (p *mountProc) exitCode(t *testing.T) int {
	t.Helper()
	p.waitExit(t, mountLimit)
	return p.cmd.ProcessState.ExitCode()
}

// stopMount unmounts cleanly with SIGTERM and checks the daemon's exit.
func stopMount(t *testing.T, p *mountProc) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, exitOK, p.exitCode(t), "stderr:\n%s", p.out)
}

// waitKilled waits for a daemon that is to die by SIGKILL (a crash point
// or the test's own kill) and fails unless it did.
func waitKilled(t *testing.T, p *mountProc) {
	t.Helper()
	p.waitExit(t, waitLimit)
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL,
		"safefs mount ended with %v, not by SIGKILL; stderr:\n%s", p.cmd.ProcessState, p.out)
}

// closeStdin closes a subprocess's stdin pipe. The process may have read
// what it needed, exited and been reaped (which closes the pipe) already.
func closeStdin(t *testing.T, w io.Closer) {
	t.Helper()
	if err := w.Close(); !errors.Is(err, os.ErrClosed) {
		require.NoError(t, err)
	}
}
