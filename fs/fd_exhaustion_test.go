package fs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/testfs"
)

// syncBuffer is a bytes.Buffer safe for a subprocess's output.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// advBuildSafefs builds cmd/safefs into a temp dir.
func advBuildSafefs(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	bin := filepath.Join(t.TempDir(), "safefs")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", bin, "./cmd/safefs")
	cmd.Dir = ".." // the module root: tests run in fs/
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/safefs: %v\n%s", err, out)
	}
	return bin
}

// TestAdvDaemonFdExhaustion: the real daemon, started with RLIMIT_NOFILE
// 64, is driven out of file descriptors by opens through the mount.
// Expected:
//   - the open that finds the daemon out of descriptors fails with EMFILE
//     or ENFILE (never EIO);
//   - meanwhile a stat, a listing, a create and the close of a writer
//     staged before the exhaustion each work or fail with EMFILE/ENFILE;
//     a create that fails leaves no file behind;
//   - close() tells the truth (docs/manual.md, promise 12): if it returned 0 the
//     new version is in place; if it failed, the previous version stays,
//     also after the handle's RELEASE (which must not commit what close
//     reported as failed), the pending bytes are kept in
//     .safefs/rejected/ and the daemon logged the failure with the path;
//   - the daemon survives; once the files are closed, everything works
//     again and a commit staged before the exhaustion lands;
//   - SIGTERM then unmounts and the daemon exits 0.
//
// Nothing here may hang: a watchdog kills the daemon after a generous
// deadline (which aborts every request in flight) and fails the test.
//
// No process is forked while this process holds a written-to file on the
// mount (see TestAdvExecWhileWriting).
func TestAdvDaemonFdExhaustion(t *testing.T) {
	testfs.Available(t)
	if os.Geteuid() != 0 {
		vacSkip(t, "needs root to mount")
	}
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		vacSkip(t, "no prlimit (Debian package util-linux): %v", err)
	}
	bin := advBuildSafefs(t)
	p := advNewDirs(t)
	for i := 0; i < 200; i++ {
		must(t, os.WriteFile(p.bpath(fmt.Sprintf("f%03d", i)), []byte("reader"), 0o644))
	}
	must(t, os.WriteFile(p.bpath("commit1"), []byte("old1"), 0o644))
	must(t, os.WriteFile(p.bpath("commit2"), []byte("old2"), 0o644))

	var logs syncBuffer
	daemon := exec.Command(prlimit, "--nofile=64:64", "--", bin, "mount", "-o", "allow_other", p.Backing, p.Dir)
	daemon.Stdout, daemon.Stderr = &logs, &logs
	must(t, daemon.Start())
	exited := make(chan struct{})
	var exitErr error
	go func() { exitErr = daemon.Wait(); close(exited) }()
	// stop ends the daemon (SIGTERM, then SIGKILL after 30 s) and
	// returns whether SIGTERM was enough, and how it exited.
	var stopOnce sync.Once
	var cleanStop bool
	stop := func() (bool, error) {
		stopOnce.Do(func() {
			_ = daemon.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
				cleanStop = true
			case <-time.After(30 * time.Second):
				_ = daemon.Process.Kill()
				<-exited
			}
		})
		return cleanStop, exitErr
	}
	// The watchdog: a request that never comes back (a daemon deadlocked
	// for want of descriptors) is ended by killing the daemon, which
	// aborts the FUSE connection; the test then fails saying so.
	var hung atomic.Bool
	watchdog := time.AfterFunc(4*time.Minute, func() {
		hung.Store(true)
		_ = daemon.Process.Kill()
	})
	t.Cleanup(func() {
		watchdog.Stop()
		stop()
		if _, ok := advMounted(t, p.Dir); ok {
			t.Logf("still mounted after the daemon ended: lazy unmount of %s", p.Dir)
			if err := unix.Unmount(p.Dir, unix.MNT_DETACH); err != nil {
				t.Errorf("umount -l %s: %v", p.Dir, err)
			}
		}
		t.Logf("daemon log:\n%s", lastLines(logs.String(), 30))
	})
	alive := func() {
		t.Helper()
		if hung.Load() {
			t.Fatalf("a request through the mount did not come back within the watchdog's deadline: the daemon was killed\n%s", logs.String())
		}
		select {
		case <-exited:
			t.Fatalf("the daemon died: %v\n%s", exitErr, logs.String())
		default:
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		// Mounted, and past its start-up (the kill-check self-test needs
		// descriptors too): it logs "mounted" when it serves.
		if _, ok := advMounted(t, p.Dir); ok && strings.Contains(logs.String(), "\tmounted\t") {
			break
		}
		select {
		case <-exited:
			t.Fatalf("daemon exited: %v\n%s", exitErr, logs.String())
		case <-ctx.Done():
			t.Fatalf("not mounted within the deadline\n%s", logs.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", daemon.Process.Pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "Max open files") {
				t.Logf("prlimit process: %s", l)
			}
		}
	}
	fdErr := func(err error) bool {
		e := advErrno(err)
		return e == syscall.EMFILE || e == syscall.ENFILE
	}

	// Two commits in progress: staged before the exhaustion.
	w1, err := os.OpenFile(p.path("commit1"), os.O_WRONLY|os.O_TRUNC, 0)
	must(t, err)
	_, err = w1.WriteString("new1")
	must(t, err)
	w2, err := os.OpenFile(p.path("commit2"), os.O_WRONLY|os.O_TRUNC, 0)
	must(t, err)
	_, err = w2.WriteString("new2")
	must(t, err)

	var open []*os.File
	var failure error
	for i := 0; i < 200; i++ {
		f, err := os.Open(p.path(fmt.Sprintf("f%03d", i)))
		if err != nil {
			failure = err
			break
		}
		open = append(open, f)
	}
	alive()
	t.Logf("opens through the mount failed after %d files: %v (errno %d)", len(open), failure, advErrno(failure))
	if failure == nil {
		t.Fatalf("200 opens succeeded: the daemon's limit of 64 was not reached")
	}
	if !fdErr(failure) {
		t.Errorf("a caller got %v when the daemon ran out of descriptors, want EMFILE or ENFILE", failure)
	}
	// While exhausted: other requests work or say EMFILE/ENFILE.
	_, statErr := os.Stat(p.path("f199"))
	_, listErr := os.ReadDir(p.Dir)
	werr := os.WriteFile(p.path("newfile"), []byte("x"), 0o644)
	c1 := w1.Close()
	b1, _ := os.ReadFile(p.bpath("commit1"))
	alive()
	t.Logf("while exhausted: stat %v; readdir %v; create %v; close of a staged writer %v (file now %q)", statErr, listErr, werr, c1, b1)
	for _, e := range []struct {
		what string
		err  error
	}{{"stat", statErr}, {"readdir", listErr}, {"create and write", werr}, {"close of the writer staged before", c1}} {
		if e.err != nil && !fdErr(e.err) {
			t.Errorf("%s while the daemon is out of descriptors: %v; want success or EMFILE/ENFILE", e.what, e.err)
		}
	}
	var pe *os.PathError
	switch {
	case werr == nil:
	case errors.As(werr, &pe) && pe.Op == "open":
		if _, err := os.Lstat(p.bpath("newfile")); err == nil {
			t.Errorf("the create failed (%v), yet BACKING/newfile exists", werr)
		}
	default:
		// The open created it (the staging pool needs no descriptor
		// then); the commit of "x" failed: the empty version stays.
		if b, err := os.ReadFile(p.bpath("newfile")); err != nil || len(b) != 0 {
			t.Errorf("the create's open succeeded and its commit failed (%v): BACKING/newfile holds %q (%v), want it empty", werr, b, err)
		}
	}
	switch {
	case c1 == nil && string(b1) != "new1":
		t.Errorf("close of commit1 returned 0 but the file holds %q, want new1", b1)
	case c1 != nil && string(b1) != "old1":
		t.Errorf("close of commit1 failed (%v) but the file holds %q: a failed close must leave the previous version old1 (docs/manual.md, promise 12)", c1, b1)
	}

	for _, f := range open {
		f.Close()
	}
	// Everything works again.
	must(t, w2.Close())
	if b, _ := os.ReadFile(p.bpath("commit2")); string(b) != "new2" {
		t.Errorf("the commit staged before the exhaustion: file holds %q, want new2", b)
	}
	must(t, os.WriteFile(p.path("after"), []byte("after"), 0o644))
	if b, err := os.ReadFile(p.path("after")); err != nil || string(b) != "after" {
		t.Errorf("after recovery: %q %v", b, err)
	}
	for i := 0; i < 100; i++ {
		f, err := os.Open(p.path(fmt.Sprintf("f%03d", i%len(open))))
		if err != nil {
			t.Fatalf("open after the files were closed: %v", err)
		}
		f.Close()
	}
	if _, err := os.ReadDir(p.Dir); err != nil {
		t.Errorf("readdir after recovery: %v", err)
	}
	alive()

	// The daemon ends cleanly; every RELEASE has been served by then.
	clean, err := stop()
	watchdog.Stop()
	if hung.Load() {
		t.Fatalf("the daemon hung (killed by the watchdog)\n%s", logs.String())
	}
	if !clean || err != nil {
		t.Errorf("SIGTERM: the daemon exited with %v (ended by SIGTERM: %v), want exit 0\n%s", err, clean, lastLines(logs.String(), 30))
	}
	if c1 != nil {
		if b, _ := os.ReadFile(p.bpath("commit1")); string(b) != "old1" {
			t.Errorf("close of commit1 failed (%v), yet after the daemon ended the file holds %q, want old1", c1, b)
		}
		if kept := swpHolding(t, filepath.Join(p.Backing, fs.InternalDir, "rejected"), []byte("new1")); len(kept) == 0 {
			t.Errorf("close of commit1 failed (%v), but its bytes are not kept in .safefs/rejected/ (docs/manual.md, promise 12)", c1)
		}
		if !vacLogMentions(logs.String(), "commit1") {
			t.Errorf("close of commit1 failed (%v), but the daemon logged nothing naming it:\n%s", c1, lastLines(logs.String(), 30))
		}
	}
}

// vacLogMentions reports whether a warning or error line of a daemon's
// console log names what.
func vacLogMentions(log, what string) bool {
	for _, l := range strings.Split(log, "\n") {
		if (strings.Contains(l, "WARN") || strings.Contains(l, "ERROR")) && strings.Contains(l, what) {
			return true
		}
	}
	return false
}

// vacSkip skips the test with the reason, except under CI (CI set),
// where a test never skips for a missing tool, device or privilege: it
// fails instead.
func vacSkip(t testing.TB, format string, a ...any) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("CI is set, so this test must run: "+format, a...)
	}
	t.Skipf(format, a...)
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
