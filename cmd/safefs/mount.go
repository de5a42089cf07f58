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
	return mountAndServe(a, stderr, nil)
}

// mountAndServe mounts and serves until the end of the mount. onReady,
// if set, marks the background daemon: it is called once the mount is
// visible, and the log goes to log_file or syslog, not stderr.
func mountAndServe(a mountArgs, stderr io.Writer, onReady func()) error {
	backing, mnt, err := preflightMount(a.backing, a.mountpoint, a.cfg.fs.AllowOther)
	if err != nil {
		return err
	}
	out, closeOut, err := logOutput(a.cfg, onReady != nil, stderr)
	if err != nil {
		return err
	}
	defer closeOut()
	log, err := newLogger(a.cfg.logFormat, a.cfg.logLevel, out)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // syncing a pipe or tty fails harmlessly
	if w := allowOtherWarning(backing, os.Geteuid(), a.cfg.fs.AllowOther); w != "" {
		log.Warn(w)
	}
	if onReady != nil {
		// Do not keep the caller's working directory busy; the paths
		// are absolute now.
		_ = os.Chdir("/")
	}
	stopPprof, err := startPprof(a.cfg.pprof, log)
	if err != nil {
		return err
	}
	defer stopPprof()
	opts := a.cfg.fs
	opts.Log = log
	raiseNofile(log)
	obs, err := startObservers(a.cfg, log)
	if err != nil {
		return err
	}
	defer obs.close()
	opts.Observer = obs.observer()
	conn, err := a.cfg.cluster.connect(log, a.cfg.fs.LockTimeout)
	if err != nil {
		return err
	}
	if conn != nil {
		// A nil *cluster.Conn in the interface would not be nil.
		opts.Cluster = conn
		defer conn.Close() // after the unmount: its locks go with the lease
	}
	stopLocks := startScriptLocks(conn, &opts, log)
	defer stopLocks()
	return serve(backing, mnt, opts, log, onReady, obs)
}

// serve mounts and stays until a signal or an unmount from outside ends
// the mount. It tells systemd (sd_notify) and onReady when it is mounted.
func serve(backing, mnt string, opts fs.Options, log *zap.Logger, onReady func(), obs *observers) error {
	// Listen before mounting: a signal that arrives while fs.Mount runs
	// must not kill us and leave a mount without a server.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGUSR1)
	if obs.audit != nil {
		signal.Notify(sigs, syscall.SIGHUP) // reopen the trail
	}
	defer signal.Stop(sigs)
	n := notifierFromEnv(log)

	srv, err := fs.Mount(backing, mnt, opts)
	if err != nil {
		return mountError(err)
	}
	obs.mounted(srv)
	status, err := listenStatus(srv, log)
	if err != nil {
		log.Warn("no status socket: safefs status will not answer", zap.Error(err))
	}
	defer status.close() // after the unmount: it answers until then
	log.Info("mounted", zap.String("backing", backing), zap.String("mountpoint", mnt), zap.Int("pid", os.Getpid()))
	n.send("READY=1\nSTATUS=serving " + backing + " on " + mnt)
	if onReady != nil {
		onReady()
	}
	waitForEnd(srv, mnt, sigs, log, n, obs)
	return nil
}

func mountError(err error) error {
	if errors.Is(err, fs.ErrBusy) || errors.Is(err, fs.ErrCluster) {
		return failf(exitBusy, "%v", err)
	}
	return failf(exitMount, "mount failed: %s", mountFailure(err))
}

// waitForEnd returns once the file system is unmounted. If Unmount fails
// (for example EBUSY) we keep serving: exiting would leave a dead mount.
func waitForEnd(srv *fs.Server, mnt string, sigs <-chan os.Signal, log *zap.Logger, n *notifier, obs *observers) {
	done := make(chan struct{})
	go func() {
		srv.Wait()
		close(done)
	}()
	for {
		select {
		case <-done:
			n.send("STOPPING=1\nSTATUS=unmounted from outside")
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
			n.send("STOPPING=1\nSTATUS=unmounting")
			if err := srv.Unmount(); err != nil {
				// One line: a newline would end STATUS= and split
				// the log line.
				why := unmountFailure(err, mnt)
				n.send("STATUS=unmount failed, still serving: " + why)
				log.Error("unmount failed, still serving; send the signal again to retry", zap.String("error", why))
				continue
			}
			log.Info("unmounted")
			return
		}
	}
}
