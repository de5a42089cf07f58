package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/audit"
	safefs "github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/scriptlock"
)

// safefsTargets are the safefs mounts, each the defaults with one edit:
// a variant with other mount options is one more line here.
var safefsTargets = []struct {
	name string
	edit func(o *safefs.Options)
}{
	{"safefs", func(o *safefs.Options) {}},
	{"safefs-none", func(o *safefs.Options) { o.Durable = false }},
	{"safefs-audit", func(o *safefs.Options) {}}, // with an audit trail (benchAudit)
	{"safefs-rmw-off", func(o *safefs.Options) { o.RMWAuto, o.RMWGlobs = false, nil }},
	{"safefs-nopt", func(o *safefs.Options) { o.Passthrough = false }}, // cache=version alone
	{"safefs-direct", cacheDirect},
	{"safefs-direct-none", func(o *safefs.Options) { cacheDirect(o); o.Durable = false }},
	{"safefs-passthrough", func(o *safefs.Options) { o.VersionCache = false }},                           // cache=direct,passthrough=read
	{"safefs-locks", func(o *safefs.Options) { cacheDirect(o); o.ScriptLocks = scriptlock.NewMemory() }}, // locks=daemon
	{"safefs-ptw", func(o *safefs.Options) { o.PassthroughWrite = true }},                                // passthrough=write
	{"safefs-ptw-none", func(o *safefs.Options) { o.PassthroughWrite, o.Durable = true, false }},
}

// cacheDirect is cache=direct (passthrough off with it): one kernel
// inode per file, the default until 2026-12-05; cluster mode's too.
func cacheDirect(o *safefs.Options) { o.VersionCache, o.Passthrough = false, false }

// targetNames lists every target in table order.
var targetNames = func() []string {
	names := append([]string{"backing", byHandTarget}, loopbackTargets...)
	for _, t := range safefsTargets {
		names = append(names, t.name)
	}
	return names
}()

// isSafefs reports whether target name is a safefs mount.
func isSafefs(name string) bool {
	for _, t := range safefsTargets {
		if t.name == name {
			return true
		}
	}
	return false
}

// target is one place the workloads run. Every target has its own fresh
// directory root holding its backing directory raw and, for the FUSE
// targets, its mountpoint.
type target struct {
	name    string
	root    string
	raw     string       // backing directory: untimed setup and cleanup go here directly
	dir     string       // where the timed workloads run: the mountpoint, or raw for "backing"
	unmount func() error // nil for "backing"
	byHand  bool         // commits are made durably by hand (byHandTarget, byHandFUSETarget)
	pid     int          // process -syscalls counts: the daemon, or this one by hand; 0 for none
}

// newTarget makes the target's directories under base and mounts it. A
// FUSE target is served by a child process of its own, as its users run
// it: a daemon shares no runtime with the workload or another daemon
// (go-fuse's readers each hold one of a Go process's processors while
// they wait for a request, design section).
func newTarget(name, base string, log *zap.Logger) (_ *target, err error) {
	root, err := os.MkdirTemp(base, "safefs-bench-"+name+"-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(root)
		}
	}()
	// MkdirTemp makes it 0700: Apache's www-data (apache workload) must get in.
	if err := os.Chmod(root, 0o755); err != nil {
		return nil, err
	}
	t := &target{name: name, root: root, raw: filepath.Join(root, "backing"), dir: filepath.Join(root, "mnt")}
	if err := os.Mkdir(t.raw, 0o755); err != nil {
		return nil, err
	}
	if name == "backing" || name == byHandTarget {
		t.dir, t.byHand = t.raw, name == byHandTarget
		if t.byHand {
			t.pid = os.Getpid()
		}
		return t, nil
	}
	if err := os.Mkdir(t.dir, 0o755); err != nil {
		return nil, err
	}
	t.byHand = name == byHandFUSETarget
	if t.unmount, t.pid, err = mountChild(name, t.raw, t.dir); err != nil {
		return nil, err
	}
	log.Info("mounted", zap.String("target", name), zap.String("mountpoint", t.dir))
	return t, nil
}

// mountTarget mounts the FUSE target name of raw on dir and returns its
// unmount (in the child daemon, serveChild).
func mountTarget(name, raw, dir string, log *zap.Logger) (func() error, error) {
	if isLoopback(name) {
		return mountLoopback(name, raw, dir)
	}
	o, err := safefsOptions(name)
	if err != nil {
		return nil, err
	}
	o.Log = log.Named(name).WithOptions(zap.IncreaseLevel(zap.WarnLevel))
	trail, err := benchAudit(name, filepath.Dir(raw), &o)
	if err != nil {
		return nil, err
	}
	srv, err := safefs.Mount(raw, dir, o)
	if err != nil {
		trail()
		return nil, fmt.Errorf("mount %s: %w", name, err)
	}
	return func() error { defer trail(); return srv.Unmount() }, nil
}

// benchAudit turns the audit trail on for the target safefs-audit; the
// returned func closes it.
func benchAudit(name, root string, o *safefs.Options) (func(), error) {
	if name != "safefs-audit" {
		return func() {}, nil
	}
	w, err := audit.Open(filepath.Join(root, "audit.log"), o.Log)
	if err != nil {
		return nil, err
	}
	o.Observer = w
	return w.Close, nil
}

// safefsOptions are the mount options of safefs target name.
func safefsOptions(name string) (safefs.Options, error) {
	for _, st := range safefsTargets {
		if st.name == name {
			o := safefs.DefaultOptions()
			st.edit(&o)
			o.AllowOther = os.Geteuid() == 0 // Apache's www-data reads through it
			return o, nil
		}
	}
	return safefs.Options{}, fmt.Errorf("unknown target %q (want some of %s)", name, strings.Join(targetNames, ","))
}

// loopbackOptions are those of go-fuse's example/loopback/main.go (v2.12.1),
// so the figures are those its users see: 1 s attribute and entry
// timeouts (libfuse's defaults), NullPermissions.
func loopbackOptions(raw string) *gofs.Options {
	sec := time.Second
	root := os.Geteuid() == 0
	var opts []string
	if root {
		opts = []string{"default_permissions"}
	}
	return &gofs.Options{
		AttrTimeout:     &sec,
		EntryTimeout:    &sec,
		NullPermissions: true,
		MountOptions: fuse.MountOptions{
			DirectMount: root,
			AllowOther:  root, // its -allow-other flag, for Apache's www-data
			FsName:      raw,
			Name:        "loopback",
			// Its -allow-other adds this: the kernel checks permissions,
			// so that other users cannot reach what the daemon (root) can.
			Options: opts,
		},
	}
}

// close unmounts the target (lazily if a plain unmount keeps failing) and
// removes its directories.
func (t *target) close() error {
	if t.unmount != nil {
		if err := t.unmount(); err != nil {
			if derr := unix.Unmount(t.dir, unix.MNT_DETACH); derr != nil {
				return fmt.Errorf("unmount %s: %v; lazy unmount: %w", t.dir, err, derr)
			}
		}
	}
	return os.RemoveAll(t.root)
}

// closeAll closes every target and then checks that none of their
// mountpoints is still in /proc/mounts.
func closeAll(ts []*target) error {
	var errs []error
	for _, t := range ts {
		errs = append(errs, t.close())
	}
	f, err := os.Open("/proc/mounts")
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		for _, t := range ts {
			if t.unmount != nil && len(fields) > 1 && fields[1] == t.dir {
				errs = append(errs, fmt.Errorf("still mounted: %s", t.dir))
			}
		}
	}
	return errors.Join(errs...)
}
