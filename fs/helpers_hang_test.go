package fs_test

// Mounts seen and hangs caught: a request through an in-process mount
// that does not come back is reported with the daemon's stacks, and
// its connection aborted so that the test can end.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/mountinfo"
)

// advMounted reports whether dir is a mount point in /proc/self/mounts,
// and with which options.
func advMounted(t testing.TB, dir string) (string, bool) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 4 && mountinfo.Unescape(f[1]) == dir {
			return f[3], true
		}
	}
	return "", false
}

// advHung is called when a request through an in-process mount did not
// come back within its deadline: it saves every goroutine's stack (the
// daemon's among them) to the test log and a file, then aborts the FUSE
// connection of dir so that the stuck threads return (ENOTCONN) and the
// test process can still end and unmount.
func advHung(t testing.TB, dir, what string) {
	t.Helper()
	buf := make([]byte, 8<<20)
	n := runtime.Stack(buf, true)
	f := filepath.Join(os.TempDir(), fmt.Sprintf("adv-hang-%d.txt", time.Now().UnixNano()))
	_ = os.WriteFile(f, buf[:n], 0o644)
	t.Errorf("%s: no answer within the deadline (daemon hung); goroutines saved in %s", what, f)
	// Kernel stacks of this process's blocked threads, for the report.
	tasks, _ := filepath.Glob("/proc/self/task/*")
	for _, task := range tasks {
		w, _ := os.ReadFile(task + "/wchan")
		switch string(w) {
		case "", "0", "futex_do_wait", "do_epoll_wait", "hrtimer_nanosleep", "fuse_dev_do_read", "do_wait":
			continue
		}
		st, _ := os.ReadFile(task + "/stack")
		t.Logf("thread %s blocked in %s:\n%s", filepath.Base(task), w, firstN(string(st), 8))
	}
	advAbortFuse(t, dir)
}

func firstN(s string, n int) string {
	l := strings.Split(s, "\n")
	if len(l) > n {
		l = l[:n]
	}
	return strings.Join(l, "\n")
}

// advCombined runs cmd (made with execCmd under ctx) and returns its
// combined output. If ctx ends first, the daemon is taken as hung:
// advHung saves the evidence and aborts the connection of dir, which
// frees a subprocess stuck in an uninterruptible FUSE request, and
// advCombined then waits for the subprocess and reports hung.
func advCombined(t testing.TB, ctx context.Context, dir, what string, cmd *exec.Cmd) ([]byte, error, bool) {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, err, false
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if ctx.Err() == nil {
			return out.Bytes(), err, false
		}
	case <-ctx.Done():
	}
	advHung(t, dir, what)
	err := <-done
	return out.Bytes(), err, true
}

// advAbortFuse aborts the FUSE connection mounted on dir (found by its
// device number in /proc/self/mountinfo, never by stat, which would hang)
// through fusectl, or where fusectl is not mounted, by a forced unmount
// of dir (which aborts the connection too).
func advAbortFuse(t testing.TB, dir string) {
	t.Helper()
	ms, err := mountinfo.Read(mountinfo.Self)
	if err != nil {
		t.Error(err)
		return
	}
	for _, m := range ms {
		if m.Point != dir {
			continue
		}
		_, minor, ok := strings.Cut(m.Dev, ":")
		if !ok {
			continue
		}
		err := os.WriteFile("/sys/fs/fuse/connections/"+minor+"/abort", []byte("1"), 0o200)
		t.Logf("aborted FUSE connection %s of %s: %v", minor, dir, err)
		if err == nil {
			return
		}
	}
	err = unix.Unmount(dir, unix.MNT_FORCE)
	t.Logf("umount(%s, MNT_FORCE) to abort the connection: %v", dir, err)
}
