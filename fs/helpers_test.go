package fs

// Helpers shared by the package's tests: mounts, their FUSE request
// trace, and the requests held at a point.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

// mountForTest mounts a fresh BACKING with the default options, changed
// by edits, and returns the server, BACKING and the mount point.
func mountForTest(t *testing.T, edits ...func(*Options)) (*Server, string, string) {
	if _, err := os.Stat("/dev/fuse"); err != nil || os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI needs /dev/fuse and root: %v", err)
		}
		t.Skip("needs /dev/fuse and root")
	}
	dir := t.TempDir()
	backing, mnt := filepath.Join(dir, "b"), filepath.Join(dir, "m")
	require.NoError(t, os.Mkdir(backing, 0o755))
	require.NoError(t, os.Mkdir(mnt, 0o755))
	o := DefaultOptions()
	o.Log = zaptest.NewLogger(t)
	// As testfs.OptionsFromEnv, which this package cannot import.
	if os.Getenv("SAFEFS_TEST_CACHE") == "direct" {
		o.VersionCache, o.Passthrough = false, false
	}
	if v := os.Getenv("SAFEFS_TEST_PASSTHROUGH"); v != "" {
		o.Passthrough = v == "1" || v == "write"
		o.PassthroughWrite = v == "write" && o.VersionCache
	}
	for _, e := range edits {
		e(&o)
	}
	srv, err := Mount(backing, mnt, o)
	require.NoError(t, err)
	t.Cleanup(func() {
		if srv.Unmount() != nil { // a test that failed with a file open: no mount left behind
			_ = syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
	})
	return srv, backing, mnt
}

// mountTraced is mountForTest with the FUSE request trace in logs.
func mountTraced(t *testing.T, edits ...func(*Options)) (*Server, string, string, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.InfoLevel)
	edits = append(edits, func(o *Options) { o.Log, o.Debug = zap.New(core), true })
	srv, backing, mnt := mountForTest(t, edits...)
	return srv, backing, mnt, logs
}

// fuseTrace is the FUSE request trace in logs (mountTraced), in order.
func fuseTrace(logs *observer.ObservedLogs) []string {
	var msgs []string
	for _, e := range logs.FilterLoggerName("fuse").All() {
		msgs = append(msgs, e.Message)
	}
	return msgs
}

// replyNode finds the first request in msgs that is(request) holds for,
// and returns the node its reply names ("n5") and the reply's index in
// msgs; "" and -1 when there is none.
func replyNode(t *testing.T, msgs []string, is func(string) bool) (string, int) {
	seq := ""
	for i, m := range msgs {
		switch {
		case seq == "" && strings.HasPrefix(m, "rx ") && is(m):
			seq = strings.Fields(strings.TrimPrefix(m, "rx "))[0] // "26:"
		case seq != "" && strings.HasPrefix(m, "tx "+seq+" "):
			j := strings.Index(m, "{n")
			require.Positive(t, j, "%s", m)
			return strings.Fields(m[j+1:])[0], i
		}
	}
	return "", -1
}

// holdAt holds each request that reaches point 20 ms, and counts them.
func holdAt(t *testing.T, srv *Server, point string) *atomic.Int64 {
	var n atomic.Int64
	at := func(p string) {
		if p == point {
			n.Add(1)
			time.Sleep(20 * time.Millisecond)
		}
	}
	srv.r.atPoint.Store(&at)
	t.Cleanup(func() { srv.r.atPoint.Store(nil) })
	return &n
}

// awaitInFuse waits until a thread of process pid waits for the answer
// to a FUSE request (its kernel wait channel is request_wait_answer):
// the request is in the daemon. It returns false if exited closes first
// (the process ended without such a wait), and fails on a hang.
func awaitInFuse(t testing.TB, pid int, exited <-chan struct{}) bool {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		select {
		case <-exited:
			return false
		default:
		}
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
		for _, task := range tasks {
			if w, _ := os.ReadFile(task + "/wchan"); string(w) == "request_wait_answer" {
				return true
			}
		}
	}
	t.Fatalf("process %d never waited for an answer of the daemon, nor ended, within 2 minutes", pid)
	return false
}
