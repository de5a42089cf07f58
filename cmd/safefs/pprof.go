package main

import (
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"go.uber.org/zap"
)

// setPprof checks a pprof=HOST:PORT or unix:PATH value. Profiles show
// file names, stacks and heap contents, so only a loopback address is
// accepted, and every local user can read it there: unix:PATH is root's
// alone.
func setPprof(c *mountConfig, v string) error {
	if strings.HasPrefix(v, unixPrefix) {
		p, err := unixAddr(v)
		c.pprof = p
		return err
	}
	host, port, err := net.SplitHostPort(v)
	if err != nil || port == "" {
		return errors.New("want HOST:PORT, such as 127.0.0.1:6060, or unix:PATH")
	}
	ip := net.ParseIP(host)
	if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return errors.New("want a loopback address (127.0.0.1, ::1 or localhost): profiles show file names and memory")
	}
	c.pprof = v
	return nil
}

// startPprof serves net/http/pprof on addr ("" for off) until stop. It
// listens before the mount, so an address in use fails the command
// (exit 2, like a log_file that cannot be opened) and leaves no mount.
func startPprof(addr string, log *zap.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := listen(addr)
	if err != nil {
		return nil, failf(exitUsage, "pprof=%s: cannot listen: %v", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("pprof server ended", zap.Error(err))
		}
	}()
	log.Info("pprof listening", zap.String(describeAddr(ln, "/debug/pprof/")))
	return func() {
		_ = srv.Close()
		_ = ln.Close() // a unix socket's file goes with it
	}, nil
}
