// Package metrics serves a mount's counters in the Prometheus text
// format. It is an fs.Observer (commits, rejections, recovery, as they
// happen) and reads the mount's levels and plain counters at scrape time.
package metrics

import (
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/journal"
)

// Source is the mounted file system, read at scrape time (*fs.Server).
type Source interface {
	Stats() fs.Stats
	Gauges() fs.Gauges
}

// fromStats are counters fs keeps itself, read at scrape: adding one is
// one line here.
var fromStats = []struct {
	name, help string
	get        func(fs.Stats) int64
}{
	{"safefs_rejected_dropped_total", "Rejected commits whose bytes were dropped because rejected/ was full.", func(s fs.Stats) int64 { return s.Dropped }},
	{"safefs_too_many_files_total", "Opens refused with EMFILE or ENFILE (files open per user or in all).", func(s fs.Stats) int64 { return s.TooManyFiles }},
	{"safefs_no_space_total", "Writes of non-root callers refused at the space reserved for root (ENOSPC).", func(s fs.Stats) int64 { return s.NoSpace }},
	{"safefs_rmw_sessions_total", "Read-modify-write sessions opened.", func(s fs.Stats) int64 { return s.RMWSessions }},
	{"safefs_rmw_waits_total", "Opens that waited for another process's read-modify-write session.", func(s fs.Stats) int64 { return s.RMWWaits }},
	{"safefs_rmw_cycles_broken_total", "Session waits refused because they would close a cycle.", func(s fs.Stats) int64 { return s.RMWCycles }},
	{"safefs_rmw_waits_given_up_total", "Session waits that ended after rmw_wait without a session.", func(s fs.Stats) int64 { return s.RMWGaveUp }},
}

// fromGauges are the mount's levels, read at scrape: one line each.
var fromGauges = []struct {
	name, help string
	get        func(fs.Gauges) int64
}{
	{"safefs_rmw_sessions_held", "Read-modify-write sessions held.", func(g fs.Gauges) int64 { return int64(g.RMWHeld) }},
	{"safefs_rmw_waiting", "Opens waiting for another's read-modify-write session.", func(g fs.Gauges) int64 { return int64(g.RMWWaiting) }},
	{"safefs_open_handles", "Files open through the mount.", func(g fs.Gauges) int64 { return int64(g.OpenHandles) }},
	{"safefs_pending_bytes", "Bytes of pending versions: staging files of open handles.", func(g fs.Gauges) int64 { return g.PendingBytes }},
	{"safefs_known_files", "Logical files in the daemon's tables: those the kernel has nodes of (falls back when it forgets them).", func(g fs.Gauges) int64 { return int64(g.KnownFiles) }},
	{"safefs_rejected_files", "Files kept in .safefs/rejected (as counted since the mount).", func(g fs.Gauges) int64 { return g.RejectedFiles }},
	{"safefs_rejected_bytes", "Disk use of the files kept in .safefs/rejected, as counted against rejected_max.", func(g fs.Gauges) int64 { return g.RejectedBytes }},
}

// Latency buckets in seconds: 100 µs to past the default lock_timeout.
var buckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// Metrics is the registry of one mount and its fs.Observer.
type Metrics struct {
	reg      *prometheus.Registry
	src      atomic.Pointer[Source]
	commits  *prometheus.CounterVec
	rejected *prometheus.CounterVec
	killed   prometheus.Counter
	lockWait prometheus.Histogram
	latency  prometheus.Histogram
	recovery *prometheus.GaugeVec
}

var _ fs.Observer = (*Metrics)(nil)

// New makes the registry, with Go runtime and process metrics.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.commits = m.counterVec("safefs_commits_total", "Commits made, by kind (replace, append, inplace).", "kind")
	m.rejected = m.counterVec("safefs_rejected_total", "Commits not made, by reason (lock_timeout, queue_full, stale, eio, enospc, other); the bytes are kept in rejected/ unless it is full.", "reason")
	m.killed = m.counter("safefs_killed_writers_total", "Closes by writers killed by a signal: not committed.")
	m.lockWait = m.histogram("safefs_lock_wait_seconds", "Wait for a file's commit lock, per commit attempt (made or rejected).")
	m.latency = m.histogram("safefs_commit_duration_seconds", "Duration of a commit made (close or fsync), lock wait included.")
	m.recovery = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "safefs_recovery",
		Help: "What recovery did at this mount: journal records, cut-off commits completed or rolled back, orphans removed, refused, torn lines."}, []string{"result"})
	m.reg.MustRegister(m.recovery, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, c := range fromStats {
		m.CounterFunc(c.name, c.help, func() float64 { return float64(m.stats(c.get)) })
	}
	m.CounterFunc("safefs_rmw_wait_seconds_total", "Time opens spent waiting for read-modify-write sessions, in all.",
		func() float64 {
			return time.Duration(m.stats(func(s fs.Stats) int64 { return s.RMWWaitNanos })).Seconds()
		})
	for _, g := range fromGauges {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: g.name, Help: g.help},
			func() float64 { return float64(m.gauge(g.get)) }))
	}
	return m
}

func (m *Metrics) counterVec(name, help, label string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{label})
	m.reg.MustRegister(c)
	return c
}

func (m *Metrics) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	m.reg.MustRegister(c)
	return c
}

func (m *Metrics) histogram(name, help string) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
	m.reg.MustRegister(h)
	return h
}

// CounterFunc adds a counter read from get at scrape (for parts outside
// fs, such as the audit trail's dropped lines).
func (m *Metrics) CounterFunc(name, help string, get func() float64) {
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, get))
}

// SetSource gives the mounted file system; until then its levels read 0.
func (m *Metrics) SetSource(s Source) { m.src.Store(&s) }

func (m *Metrics) stats(get func(fs.Stats) int64) int64 {
	if s := m.src.Load(); s != nil {
		return get((*s).Stats())
	}
	return 0
}

func (m *Metrics) gauge(get func(fs.Gauges) int64) int64 {
	if s := m.src.Load(); s != nil {
		return get((*s).Gauges())
	}
	return 0
}

// Committed counts a commit made.
func (m *Metrics) Committed(e fs.CommitEvent) {
	m.commits.WithLabelValues(e.Kind).Inc()
	m.lockWait.Observe(e.LockWait.Seconds())
	m.latency.Observe(e.Duration.Seconds())
}

// Rejected counts a commit not made; a killed writer's close apart.
func (m *Metrics) Rejected(e fs.RejectEvent) {
	if e.Reason == fs.ReasonKilled {
		m.killed.Inc()
		return
	}
	m.rejected.WithLabelValues(e.Reason).Inc()
	m.lockWait.Observe(e.LockWait.Seconds())
}

// Recovered records what recovery did at mount.
func (m *Metrics) Recovered(s journal.Summary) {
	for result, n := range map[string]int{"records": s.Records, "completed": s.Completed, "rolled_back": s.RolledBack,
		"orphans": s.Orphans, "refused": s.Refused, "torn": s.Torn} {
		m.recovery.WithLabelValues(result).Set(float64(n))
	}
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Serve serves /metrics on ln until Close of the returned server.
func (m *Metrics) Serve(ln net.Listener) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends with ErrServerClosed at Close
	return srv
}
