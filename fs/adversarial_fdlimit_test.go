package fs_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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
// Expected: callers get EMFILE/ENFILE (reported: which, or EIO), the
// daemon survives, once the files are closed everything works again, and
// a commit in progress before the exhaustion finishes afterwards.
//
// No process is forked while this process holds a written-to file on the
// mount (see TestAdvExecWhileWriting).
func TestAdvDaemonFdExhaustion(t *testing.T) {
	testfs.Available(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("no prlimit")
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
	exited := make(chan error, 1)
	go func() { exited <- daemon.Wait() }()
	t.Cleanup(func() {
		_ = daemon.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = daemon.Process.Kill()
			<-exited
		}
		if _, ok := advMounted(t, p.Dir); ok {
			t.Logf("still mounted after the daemon ended: lazy unmount of %s", p.Dir)
			if err := unix.Unmount(p.Dir, unix.MNT_DETACH); err != nil {
				t.Errorf("umount -l %s: %v", p.Dir, err)
			}
		}
		t.Logf("daemon log:\n%s", lastLines(logs.String(), 30))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		if _, ok := advMounted(t, p.Dir); ok {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("daemon exited: %v\n%s", err, logs.String())
		case <-ctx.Done():
			t.Fatalf("not mounted within the deadline\n%s", logs.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	alive := func() {
		t.Helper()
		select {
		case err := <-exited:
			t.Fatalf("the daemon died: %v\n%s", err, logs.String())
		default:
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", daemon.Process.Pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "Max open files") {
				t.Logf("prlimit process: %s", l)
			}
		}
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
	t.Logf("opens through the mount failed after %d files: %v (errno %d)", len(open), failure, advErrno(failure))
	if failure == nil {
		t.Fatalf("200 opens succeeded: the daemon's limit of 64 was not reached")
	}
	switch advErrno(failure) {
	case syscall.EMFILE, syscall.ENFILE:
	default:
		t.Errorf("a caller got %v when the daemon ran out of descriptors, want EMFILE or ENFILE", failure)
	}
	alive()
	// While exhausted: other requests get an errno too, or work, and
	// nothing hangs; a commit may fail, but cleanly.
	_, statErr := os.Stat(p.path("f199"))
	_, listErr := os.ReadDir(p.Dir)
	werr := os.WriteFile(p.path("newfile"), []byte("x"), 0o644)
	c1 := w1.Close()
	b1, _ := os.ReadFile(p.bpath("commit1"))
	t.Logf("while exhausted: stat %v; readdir %v; create %v; close of a staged writer %v (file now %q)", statErr, listErr, werr, c1, b1)
	if c1 == nil && string(b1) != "new1" || c1 != nil && string(b1) != "old1" && string(b1) != "new1" {
		t.Errorf("commit while exhausted: close %v, file %q: want new1 on success, a whole version on failure", c1, b1)
	}
	for _, e := range []error{statErr, listErr, werr, c1} {
		if e != nil && advErrno(e) == syscall.EIO {
			t.Errorf("EIO while the daemon is out of descriptors (%v): want EMFILE/ENFILE", e)
		}
	}
	alive()

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
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
