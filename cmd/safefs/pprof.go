package main

import (
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"go.uber.org/zap"
)

// setPprof checks a pprof=HOST:PORT value. Profiles show file names,
// stacks and heap contents, so only a loopback address is accepted.
func setPprof(c *mountConfig, v string) error {
	host, port, err := net.SplitHostPort(v)
	if err != nil || port == "" {
		return errors.New("want HOST:PORT, such as 127.0.0.1:6060")
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
	ln, err := net.Listen("tcp", addr)
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
	log.Info("pprof listening", zap.String("address", ln.Addr().String()))
	return func() { _ = srv.Close() }, nil
}
