package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/audit"
	safefs "github.com/safefs/safefs/fs"
)

var targetNames = []string{"backing", "loopback", "safefs", "safefs-none", "safefs-audit"}

// target is one place the workloads run. Every target has its own fresh
// directory root holding its backing directory raw and, for the FUSE
// targets, its mountpoint.
type target struct {
	name    string
	root    string
	raw     string       // backing directory: untimed setup and cleanup go here directly
	dir     string       // where the timed workloads run: the mountpoint, or raw for "backing"
	unmount func() error // nil for "backing"
}

// newTarget makes the target's directories under base and mounts it.
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
	t := &target{name: name, root: root, raw: filepath.Join(root, "backing"), dir: filepath.Join(root, "mnt")}
	if err := os.Mkdir(t.raw, 0o755); err != nil {
		return nil, err
	}
	if name == "backing" {
		t.dir = t.raw
		return t, nil
	}
	if err := os.Mkdir(t.dir, 0o755); err != nil {
		return nil, err
	}
	switch name {
	case "loopback":
		node, err := gofs.NewLoopbackRoot(t.raw)
		if err != nil {
			return nil, err
		}
		srv, err := gofs.Mount(t.dir, node, &gofs.Options{MountOptions: fuse.MountOptions{
			DirectMount: os.Geteuid() == 0,
			Name:        "loopback",
		}})
		if err != nil {
			return nil, fmt.Errorf("mount loopback: %w", err)
		}
		t.unmount = func() error {
			if err := srv.Unmount(); err != nil {
				return err
			}
			srv.Wait()
			return nil
		}
	case "safefs", "safefs-none", "safefs-audit":
		o := safefs.DefaultOptions()
		o.Durable = name != "safefs-none"
		o.Log = log.Named(name).WithOptions(zap.IncreaseLevel(zap.WarnLevel))
		trail, err := benchAudit(name, root, &o)
		if err != nil {
			return nil, err
		}
		srv, err := safefs.Mount(t.raw, t.dir, o)
		if err != nil {
			trail()
			return nil, fmt.Errorf("mount %s: %w", name, err)
		}
		t.unmount = func() error { defer trail(); return srv.Unmount() }
	default:
		return nil, fmt.Errorf("unknown target %q (want some of %s)", name, strings.Join(targetNames, ","))
	}
	log.Info("mounted", zap.String("target", name), zap.String("mountpoint", t.dir))
	return t, nil
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

// benchAudit turns the audit trail on for safefs-audit (durability full,
// -o audit=FILE); the returned func closes it.
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
