package main

import (
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/zap"

	"github.com/safefs/safefs/audit"
	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/journal"
	"github.com/safefs/safefs/metrics"
)

// observers are the metrics endpoint and the audit trail of a mount,
// each nil when off.
type observers struct {
	metrics *metrics.Metrics
	http    *http.Server
	ln      net.Listener // closed with http, in case Serve had not begun
	audit   *audit.Writer
}

// startObservers listens on the metrics address and opens the audit
// trail, before mounting: a refusal leaves nothing mounted.
func startObservers(c mountConfig, log *zap.Logger) (*observers, error) {
	o := &observers{}
	if c.auditFile != "" {
		w, err := audit.Open(c.auditFile, log)
		if err != nil {
			return nil, failf(exitAudit, "audit file: %v", err)
		}
		o.audit = w
	}
	if c.metricsAddr != "" {
		ln, err := listen(c.metricsAddr)
		if err != nil {
			o.close()
			return nil, failf(exitMetrics, "metrics address: %v", err)
		}
		o.metrics = metrics.New()
		if o.audit != nil {
			o.metrics.CounterFunc("safefs_audit_dropped_total", "Audit lines lost because the queue was full.",
				func() float64 { return float64(o.audit.Dropped()) })
		}
		o.http, o.ln = o.metrics.Serve(ln), ln
		log.Info("serving metrics", zap.String(describeAddr(ln, "/metrics")))
	}
	return o, nil
}

// observer is what fs is told to tell: nil, one, or both.
func (o *observers) observer() fs.Observer {
	switch {
	case o.metrics != nil && o.audit != nil:
		return fanOut{o.metrics, o.audit}
	case o.metrics != nil:
		return o.metrics
	case o.audit != nil:
		return o.audit
	}
	return nil
}

func (o *observers) mounted(srv *fs.Server) {
	if o.metrics != nil {
		o.metrics.SetSource(srv)
	}
}

// reopen starts a new audit file (SIGHUP, after a log rotation).
func (o *observers) reopen() {
	if o.audit != nil {
		o.audit.Reopen()
	}
}

// close ends both, after the unmount (whose last commits they see).
func (o *observers) close() {
	if o.http != nil {
		_ = o.http.Close()
		_ = o.ln.Close() // a unix socket's file goes with it
	}
	if o.audit != nil {
		o.audit.Close()
	}
}

// fanOut tells every observer, in order.
type fanOut []fs.Observer

func (f fanOut) Committed(e fs.CommitEvent) {
	for _, o := range f {
		o.Committed(e)
	}
}

func (f fanOut) Rejected(e fs.RejectEvent) {
	for _, o := range f {
		o.Rejected(e)
	}
}

func (f fanOut) Recovered(s journal.Summary) {
	for _, o := range f {
		o.Recovered(s)
	}
}

// setMetrics checks a metrics=HOST:PORT or unix:PATH value.
func setMetrics(c *mountConfig, v string) error {
	if strings.HasPrefix(v, unixPrefix) {
		p, err := unixAddr(v)
		c.metricsAddr = p
		return err
	}
	if _, _, err := net.SplitHostPort(v); err != nil {
		return err
	}
	c.metricsAddr = v
	return nil
}

// setAudit keeps the file's absolute path: reopens must find it again.
func setAudit(c *mountConfig, v string) error {
	abs, err := filepath.Abs(v)
	if err != nil {
		return err
	}
	if st, err := os.Stat(abs); err == nil && st.IsDir() {
		return errors.New("is a directory")
	}
	c.auditFile = abs
	return nil
}
