package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
		if len(f) >= 3 && unescapeMountField(f[1]) == path {
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

// stderrWatch collects a subprocess's stderr and notices the "mounted"
// log line.
type stderrWatch struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	mounted chan struct{}
	seen    bool
}

func (w *stderrWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	// Console format: time<TAB>level<TAB>message<TAB>fields.
	if !w.seen && strings.Contains(w.buf.String(), "\tmounted\t") {
		w.seen = true
		close(w.mounted)
	}
	return len(p), nil
}

func (w *stderrWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// mountProc is a running `safefs mount`.
type mountProc struct {
	cmd     *exec.Cmd
	stderr  *stderrWatch
	exited  chan struct{}
	waitErr error // valid once exited is closed
}

// startMount starts `safefs mount backing mnt` and registers a cleanup
// that kills it and detaches mnt if it is still mounted.
func startMount(t *testing.T, backing, mnt string) *mountProc {
	t.Helper()
	p := &mountProc{
		cmd:    exec.Command(safefsBin, "mount", backing, mnt),
		stderr: &stderrWatch{mounted: make(chan struct{})},
		exited: make(chan struct{}),
	}
	p.cmd.Stderr = p.stderr
	require.NoError(t, p.cmd.Start())
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.kill(t)
		unmountIfMounted(t, mnt)
	})
	return p
}

func (p *mountProc) kill(t *testing.T) {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		t.Errorf("cleanup: safefs pid %d did not die", p.cmd.Process.Pid)
	}
}

// waitMounted waits (up to 20 s) for the "mounted" log line.
func (p *mountProc) waitMounted(t *testing.T) {
	t.Helper()
	select {
	case <-p.stderr.mounted:
	case <-p.exited:
		t.Fatalf("safefs mount exited before mounting (%v); stderr:\n%s", p.waitErr, p.stderr)
	case <-time.After(20 * time.Second):
		t.Fatalf("no \"mounted\" line after 20s; stderr:\n%s", p.stderr)
	}
}

// exitCode waits for the process to end and returns its exit code.
func (p *mountProc) exitCode(t *testing.T) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("safefs mount still running after 20s; stderr:\n%s", p.stderr)
	}
	return p.cmd.ProcessState.ExitCode()
}

// umountFromOutside unmounts the way an administrator would.
func umountFromOutside(t *testing.T, mnt string) {
	t.Helper()
	if os.Geteuid() == 0 {
		require.NoError(t, syscall.Unmount(mnt, 0))
		return
	}
	out, err := exec.Command("fusermount3", "-u", mnt).CombinedOutput()
	require.NoError(t, err, "fusermount3 -u: %s", out)
}

func TestMountLifeCycle(t *testing.T) {
	tests := []struct {
		name string
		stop func(t *testing.T, p *mountProc, mnt string)
	}{
		{"SIGTERM", func(t *testing.T, p *mountProc, _ string) { require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM)) }},
		{"SIGINT", func(t *testing.T, p *mountProc, _ string) { require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT)) }},
		{"umount from outside", func(t *testing.T, _ *mountProc, mnt string) { umountFromOutside(t, mnt) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			requireFuse(t)
			backing, mnt := tempDir(t), tempDir(t)
			p := startMount(t, backing, mnt)
			p.waitMounted(t)

			fstype, ok := mountType(t, mnt)
			require.True(t, ok, "%s not in /proc/mounts after the mounted line", mnt)
			assert.Equal(t, "fuse.safefs", fstype)

			require.NoError(t, os.WriteFile(filepath.Join(mnt, "hello.txt"), []byte("hello\n"), 0o644))
			got, err := os.ReadFile(filepath.Join(backing, "hello.txt"))
			require.NoError(t, err)
			assert.Equal(t, "hello\n", string(got))

			tt.stop(t, p, mnt)
			assert.Equal(t, exitOK, p.exitCode(t), "stderr:\n%s", p.stderr)
			_, ok = mountType(t, mnt)
			assert.False(t, ok, "%s still mounted after safefs exited", mnt)
		})
	}
}

func TestMountBusyBacking(t *testing.T) {
	requireFuse(t)
	backing, mnt := tempDir(t), tempDir(t)
	p := startMount(t, backing, mnt)
	p.waitMounted(t)

	t.Run("second mount", func(t *testing.T) {
		mnt2 := tempDir(t)
		t.Cleanup(func() { unmountIfMounted(t, mnt2) })
		r := runSafefs(t, nil, "mount", backing, mnt2)
		assert.Equal(t, exitBusy, r.code, r.stderr)
		assert.Contains(t, r.stderr, "already served")
	})
	t.Run("recover", func(t *testing.T) {
		r := runSafefs(t, nil, "recover", backing)
		assert.Equal(t, exitBusy, r.code, r.stderr)
		assert.Contains(t, r.stderr, "already served")
	})

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, exitOK, p.exitCode(t), "stderr:\n%s", p.stderr)
}

func TestRefuseMountedMountpoint(t *testing.T) {
	tests := []struct {
		name  string
		mount func(t *testing.T, dir string)
		want  string
	}{
		{"tmpfs", mountTmpfs, "already a mount point"},
		{"stale FUSE mount", mountStaleFuse, "umount -l"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			requireRoot(t)
			backing, mnt := tempDir(t), tempDir(t)
			tt.mount(t, mnt)
			t.Cleanup(func() { unmountIfMounted(t, mnt) })
			r := runSafefs(t, nil, "mount", backing, mnt)
			assert.Equal(t, exitMounted, r.code, r.stderr)
			assertOneLine(t, r.stderr, tt.want)
		})
	}
}

func mountTmpfs(t *testing.T, dir string) {
	err := syscall.Mount("none", dir, "tmpfs", 0, "")
	if errors.Is(err, syscall.EPERM) {
		t.Skip("mount not permitted here (no CAP_SYS_ADMIN)")
	}
	require.NoError(t, err)
}

// mountStaleFuse makes the mount a dead FUSE server leaves behind: mount
// with a /dev/fuse descriptor, then close it, which aborts the connection
// so that stat fails with ENOTCONN.
func mountStaleFuse(t *testing.T, dir string) {
	requireFuse(t)
	fd, err := syscall.Open("/dev/fuse", syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	require.NoError(t, err)
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0", fd)
	err = syscall.Mount("safefs-test", dir, "fuse", 0, opts)
	syscall.Close(fd)
	if errors.Is(err, syscall.EPERM) {
		t.Skip("mount not permitted here (no CAP_SYS_ADMIN)")
	}
	require.NoError(t, err)
	_, err = os.Stat(dir)
	require.ErrorIs(t, err, syscall.ENOTCONN, "the test mount is not stale")
}
