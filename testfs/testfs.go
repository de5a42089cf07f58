// Package testfs mounts safefs for tests and runs workloads against it.
//
// The heaviest tests (30 s or more under -race: many Perl processes,
// thousands of commits) call t.Parallel, so go test runs them two at a
// time after the others: one alone leaves part of the machine idle
// (FUSE round trips, Perl start-up), and they are CI's critical path.
// TestPosixMount stays serial: go-fuse's FdLeak test counts the test
// process's descriptors, which another mount in the process changes.
package testfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/fs"
)

// Mount is a safefs mounted in a test's temp dir.
type Mount struct {
	Backing string // the backing directory
	Dir     string // the mount point
	Opts    fs.Options
	srv     *fs.Server
}

// Available reports whether this machine can mount FUSE file systems.
// Under CI (CI set) a missing FUSE is a failure, never a skip.
func Available(t testing.TB) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err == nil {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal("/dev/fuse is missing, and CI is set: FUSE tests must run")
	}
	t.Skip("/dev/fuse is missing")
}

// New mounts safefs over a fresh backing directory. edit may change the
// options. The mount is removed in cleanup; a failed unmount fails the test.
func New(t testing.TB, edit ...func(*fs.Options)) *Mount {
	t.Helper()
	Available(t)
	root := t.TempDir()
	// t.TempDir is 0700: other users (www-data) must reach the mount.
	for _, d := range []string{root, filepath.Dir(root)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m := &Mount{Backing: filepath.Join(root, "orig"), Dir: filepath.Join(root, "mnt")}
	for _, d := range []string{m.Backing, m.Dir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m.Opts = fs.DefaultOptions()
	m.Opts.AllowOther = os.Geteuid() == 0
	m.Opts.Log = zaptest.NewLogger(t)
	rmwFromEnv(&m.Opts)
	OptionsFromEnv(&m.Opts)
	for _, e := range edit {
		e(&m.Opts)
	}
	m.start(t)
	return m
}

func (m *Mount) start(t testing.TB) {
	t.Helper()
	srv, err := fs.Mount(m.Backing, m.Dir, m.Opts)
	if err != nil {
		t.Fatalf("mount %s: %v", m.Dir, err)
	}
	m.srv = srv
	t.Cleanup(func() { m.stop(t) })
}

func (m *Mount) stop(t testing.TB) {
	if m.srv == nil {
		return
	}
	srv := m.srv
	m.srv = nil
	err := srv.Unmount()
	// A failed test may leave processes exiting with files open (busy).
	for i := 0; err != nil && i < 50; i++ {
		time.Sleep(100 * time.Millisecond)
		err = srv.Unmount()
	}
	if err != nil {
		t.Errorf("unmount %s: %v; detached it (lazy unmount of this mount point only)", m.Dir, err)
		_ = unix.Unmount(m.Dir, unix.MNT_DETACH)
	}
}

// Stats returns the mount's counters.
func (m *Mount) Stats() fs.Stats { return m.srv.Stats() }

// Status returns the mount's state (sessions, locks, writers).
func (m *Mount) Status() fs.Status { return m.srv.Status() }

// Gauges returns the mount's levels (open handles, pending bytes).
func (m *Mount) Gauges() fs.Gauges { return m.srv.Gauges() }

// Remount unmounts and mounts again over the same backing directory.
func (m *Mount) Remount(t testing.TB) {
	t.Helper()
	m.stop(t)
	m.start(t)
}

// Path joins names under the mount point.
func (m *Mount) Path(names ...string) string {
	return filepath.Join(append([]string{m.Dir}, names...)...)
}

// BackingPath joins names under the backing directory.
func (m *Mount) BackingPath(names ...string) string {
	return filepath.Join(append([]string{m.Backing}, names...)...)
}

// rmwFromEnv applies SAFEFS_TEST_RMW (off, auto or GLOB[:GLOB...]) to
// the options, so that a whole suite can run with sessions on or off
// whatever the default is. Tests of sessions set their own options.
func rmwFromEnv(o *fs.Options) {
	switch v := os.Getenv("SAFEFS_TEST_RMW"); v {
	case "":
	case "off":
		o.RMWAuto, o.RMWGlobs = false, nil
	case "auto":
		o.RMWAuto, o.RMWGlobs = true, nil
	default:
		o.RMWAuto, o.RMWGlobs = false, strings.Split(v, ":")
	}
}

// OptionsFromEnv applies the test environment to the options, so that a
// whole suite runs with them: SAFEFS_TEST_CACHE=direct turns cache=version
// off (and passthrough=read, unless SAFEFS_TEST_PASSTHROUGH=1 keeps it),
// SAFEFS_TEST_PASSTHROUGH=0 or 1 turns passthrough=read off or on, =write
// turns passthrough=write on, SAFEFS_TEST_DURABILITY=none sets durability=none and
// SAFEFS_TEST_LOCKS=kernel sets locks=kernel (and cache=direct).
func OptionsFromEnv(o *fs.Options) {
	if os.Getenv("SAFEFS_TEST_CACHE") == "direct" {
		o.VersionCache, o.Passthrough = false, false
	}
	if os.Getenv("SAFEFS_TEST_LOCKS") == "kernel" {
		o.KernelLocks, o.VersionCache, o.Passthrough = true, false, false
	}
	switch os.Getenv("SAFEFS_TEST_PASSTHROUGH") {
	case "0":
		o.Passthrough = false
	case "1":
		o.Passthrough = true
	case "write":
		o.Passthrough, o.PassthroughWrite = true, o.VersionCache
	}
	if os.Getenv("SAFEFS_TEST_DURABILITY") == "none" {
		o.Durable = false
	}
}
