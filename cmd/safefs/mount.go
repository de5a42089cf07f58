package main

import (
	"errors"
	"io"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"

	"github.com/safefs/safefs/fs"
)

func runMount(args []string, stdout, stderr io.Writer) error {
	a, err := parseMountArgs(args)
	if err != nil {
		return err
	}
	if a.help {
		printMountUsage(stdout)
		return nil
	}
	backing, mnt, err := preflightMount(a.backing, a.mountpoint)
	if err != nil {
		return err
	}
	log, err := newLogger(a.cfg.logFormat, a.cfg.logLevel, stderr)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // syncing a pipe or tty fails harmlessly
	opts := a.cfg.fs
	opts.Log = log
	raiseNofile(log)
	obs, err := startObservers(a.cfg, log)
	if err != nil {
		return err
	}
	defer obs.close()
	opts.Observer = obs.observer()
	return serve(backing, mnt, opts, log, obs)
}

// serve mounts and stays in the foreground until a signal or an unmount
// from outside ends the mount.
func serve(backing, mnt string, opts fs.Options, log *zap.Logger, obs *observers) error {
	// Listen before mounting: a signal that arrives while fs.Mount runs
	// must not kill us and leave a mount without a server.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGUSR1)
	if obs.audit != nil {
		signal.Notify(sigs, syscall.SIGHUP) // reopen the trail
	}
	defer signal.Stop(sigs)

	srv, err := fs.Mount(backing, mnt, opts)
	if err != nil {
		return mountError(err)
	}
	obs.mounted(srv)
	log.Info("mounted", zap.String("backing", backing), zap.String("mountpoint", mnt))
	waitForEnd(srv, sigs, log, obs)
	return nil
}

func mountError(err error) error {
	if errors.Is(err, fs.ErrBusy) {
		return failf(exitBusy, "%v", err)
	}
	return failf(exitMount, "mount failed: %v", err)
}

// waitForEnd returns once the file system is unmounted. If Unmount fails
// (for example EBUSY) we keep serving: exiting would leave a dead mount.
func waitForEnd(srv *fs.Server, sigs <-chan os.Signal, log *zap.Logger, obs *observers) {
	done := make(chan struct{})
	go func() {
		srv.Wait()
		close(done)
	}()
	for {
		select {
		case <-done:
			log.Info("unmounted from outside")
			return
		case sig := <-sigs:
			if sig == syscall.SIGUSR1 {
				srv.LogStats() // the operator asks for the counters
				continue
			}
			if sig == syscall.SIGHUP {
				obs.reopen()
				continue
			}
			log.Info("unmounting", zap.Stringer("signal", sig))
			if err := srv.Unmount(); err != nil {
				log.Error("unmount failed, still serving; send the signal again to retry", zap.Error(err))
				continue
			}
			log.Info("unmounted")
			return
		}
	}
}
