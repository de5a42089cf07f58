package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/safefs/safefs/internal/proc"
)

// The -cgi-apps table and the -soak row. Separate from the main table:
// each row runs several rounds, the targets taking turns within a
// round (in another order each round, so none always follows the
// same), and shows the medians. -soak runs the same mix on safefs for
// a while and samples the daemon's RSS.

// appsGoal is the ratio to the plain directory every row should reach.
const appsGoal = 0.95

// soakLimit is the growth of the daemon's RSS the soak allows.
const soakLimit = 32 << 10 // KiB

// appsConfig holds the flags of -cgi-apps and -soak.
type appsConfig struct {
	apps, soak bool
	n, staticN int // requests per run: of each CGI app, of the static page
	rounds     int
	soakFor    time.Duration
	soakEvery  time.Duration // between two RSS samples
}

func appsFlags(fl *flag.FlagSet) *appsConfig {
	ac := &appsConfig{soakEvery: 5 * time.Second}
	fl.BoolVar(&ac.apps, "cgi-apps", false, "print only the cgi-apps table: Perl CGI apps (guestbook, flock counter, GDBM counter, append log) and a static page under Apache, in rounds, medians (-targets: default backing,loopback,safefs)")
	fl.IntVar(&ac.n, "cgi-apps-n", 400, "-cgi-apps, -soak: requests per run of each CGI app")
	fl.IntVar(&ac.staticN, "cgi-apps-static-n", 4000, "-cgi-apps, -soak: requests per run of the static page")
	fl.IntVar(&ac.rounds, "cgi-apps-rounds", 3, "-cgi-apps: rounds")
	fl.BoolVar(&ac.soak, "soak", false, "print only the soak row: the cgi-apps mix on safefs for -soak-for, sampling the daemon's RSS")
	fl.DurationVar(&ac.soakFor, "soak-for", 10*time.Minute, "-soak: how long")
	return ac
}

func (ac *appsConfig) requests(app cgiApp) int {
	if app.name == "static-79k" {
		return ac.staticN
	}
	return ac.n
}

// appsTarget is a mounted target with an Apache serving it.
type appsTarget struct {
	t    *target
	srv  *apache
	data string
}

// startApps mounts the targets and starts an Apache on each; stop
// undoes both.
func startApps(ctx context.Context, log *zap.Logger, dir string, tnames []string) (ats []*appsTarget, stop func() error, err error) {
	var ts []*target
	stop = func() error {
		var errs []error
		for _, at := range ats {
			errs = append(errs, at.srv.stop())
		}
		return errors.Join(append(errs, closeAll(ts))...)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, stop())
		}
	}()
	for _, name := range tnames {
		t, err := newTarget(name, dir, log)
		if err != nil {
			return nil, stop, err
		}
		ts = append(ts, t)
		data := filepath.Join(t.dir, appsDir)
		if err := appsSetup(data); err != nil {
			return nil, stop, fmt.Errorf("%s: %w", name, err)
		}
		srv, err := startApacheWith(ctx, t.dir, appsConf(data))
		if err != nil {
			return nil, stop, fmt.Errorf("%s: %w", name, err)
		}
		ats = append(ats, &appsTarget{t, srv, data})
	}
	return ats, stop, nil
}

// appsSample is one run of one app on one target.
type appsSample struct {
	rate  float64 // requests/s
	cpuUs float64 // the daemon's CPU per request, µs (0 without a daemon)
	err   error
}

// runApp resets the app's data, sends n requests, then checks the data.
func (at *appsTarget) runApp(ctx context.Context, app cgiApp, n int) (s appsSample) {
	if app.reset != nil {
		if s.err = app.reset(at.data); s.err != nil {
			return s
		}
	}
	cpu0, _ := daemonCPU(at.t.pid)
	start := time.Now()
	if s.err = app.load(ctx, at.srv.addr, n); s.err != nil {
		s.err = fmt.Errorf("%w%s", s.err, at.srv.errorLog())
		return s
	}
	s.rate = float64(n) / time.Since(start).Seconds()
	if cpu1, err := daemonCPU(at.t.pid); err == nil && at.t.pid != 0 {
		s.cpuUs = (cpu1 - cpu0).Seconds() * 1e6 / float64(n)
	}
	if app.check != nil {
		s.err = app.check(at.data, n)
	}
	return s
}

// daemonCPU is the user and system CPU time process pid has used, all
// its threads (0 for pid 0: no daemon).
func daemonCPU(pid int) (time.Duration, error) {
	if pid == 0 {
		return 0, nil
	}
	return proc.CPUTime(uint32(pid))
}

// median of the samples' field; samples are not empty.
func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// rotated is ts starting at its r-th element.
func rotated[T any](ts []T, r int) []T {
	r %= len(ts)
	return append(slices.Clone(ts[r:]), ts[:r]...)
}

// appsBench runs the rounds and prints the table, the goal's misses
// and, with trace, the FUSE requests per request.
func appsBench(log *zap.Logger, stdout, stderr io.Writer, dir string, tnames []string, ac *appsConfig, trace, markdown bool) (err error) {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer cancel()
	ats, stop, err := startApps(ctx, log, dir, tnames)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, stop()) }()
	samples := map[string]map[string][]appsSample{}
	for r := range ac.rounds {
		for _, app := range cgiApps {
			if samples[app.name] == nil {
				samples[app.name] = map[string][]appsSample{}
			}
			for _, at := range rotated(ats, r) {
				if ctx.Err() != nil {
					return errors.New("interrupted")
				}
				s := at.runApp(ctx, app, ac.requests(app))
				log.Info("ran", zap.Int("round", r), zap.String("app", app.name), zap.String("target", at.t.name), zap.Float64("req/s", s.rate), zap.Error(s.err))
				if s.err != nil {
					fmt.Fprintf(stderr, "safefs-bench: %s on %s, round %d: %v\n", app.name, at.t.name, r+1, s.err)
				}
				samples[app.name][at.t.name] = append(samples[app.name][at.t.name], s)
			}
		}
	}
	ws, res := appsResults(samples)
	fmt.Fprintf(stdout, "cgi-apps: %d rounds, medians; each CGI app %d requests, %d at a time; the static page (79 KiB) %d requests, %d at a time\n\n",
		ac.rounds, ac.n, appsCGIConns, ac.staticN, apacheConns)
	writeTable(stdout, ws, tnames, res, config{}, markdown)
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, appsMisses(tnames, res))
	if trace {
		appsTrace(ctx, stdout, ats, ac, markdown)
	}
	for _, m := range res {
		for _, r := range m {
			if r.err != nil {
				return errors.New("some runs failed")
			}
		}
	}
	return nil
}

// appsResults are the table's rows: the median rate (the first error if
// a run failed), and a second row, the daemon's median CPU per request.
func appsResults(samples map[string]map[string][]appsSample) ([]workload, map[string]map[string]result) {
	var ws []workload
	res := map[string]map[string]result{}
	for _, app := range cgiApps {
		ws = append(ws, workload{name: app.name, unit: "req/s", extra: func(config) string { return app.name + ": daemon CPU / request" }})
		res[app.name] = map[string]result{}
		for t, ss := range samples[app.name] {
			var rates, cpus []float64
			r := result{ran: true}
			for _, s := range ss {
				if s.err != nil && r.err == nil {
					r.err = s.err
				}
				rates, cpus = append(rates, s.rate), append(cpus, s.cpuUs)
			}
			r.value, r.extra = median(rates), "-"
			if c := median(cpus); c > 0 {
				r.extra = fmt.Sprintf("%.0f µs", c)
			}
			res[app.name][t] = r
		}
	}
	return ws, res
}

// appsMisses names the cells below appsGoal x the plain directory.
func appsMisses(tnames []string, res map[string]map[string]result) string {
	var miss []string
	compared := false
	for _, app := range cgiApps {
		base := res[app.name]["backing"]
		if !base.ran || base.err != nil || base.value <= 0 {
			continue
		}
		compared = true
		for _, t := range tnames {
			r := res[app.name][t]
			if t == "backing" || r.err != nil || !r.ran {
				continue
			}
			if q := r.value / base.value; q < appsGoal {
				miss = append(miss, fmt.Sprintf("%s on %s %.2fx", app.name, t, q))
			}
		}
	}
	if !compared {
		return "goal: no figure of the plain directory to compare with"
	}
	if len(miss) == 0 {
		return fmt.Sprintf("goal: every row at least %.2fx the plain directory: met", appsGoal)
	}
	return fmt.Sprintf("goal: every row at least %.2fx the plain directory: missed by %s", appsGoal, strings.Join(miss, ", "))
}

// appsTrace runs each app once more on each FUSE target, untimed, under
// the FUSE tracepoints, and prints the requests per HTTP request.
func appsTrace(ctx context.Context, w io.Writer, ats []*appsTarget, ac *appsConfig, markdown bool) {
	fmt.Fprintln(w, "\nFUSE requests per HTTP request, by kind, most time first: per request x median µs from the kernel's send to the reply:")
	for _, app := range cgiApps {
		for _, at := range ats {
			if at.t.unmount == nil {
				continue
			}
			line := fmt.Sprintf("%s on %s: %s", app.name, at.t.name, appsTraceOne(ctx, at, app, ac.requests(app)))
			if markdown {
				line = "- " + line
			}
			fmt.Fprintln(w, line)
		}
	}
}

func appsTraceOne(ctx context.Context, at *appsTarget, app cgiApp, n int) string {
	if app.reset != nil {
		if err := app.reset(at.data); err != nil {
			return errCell(err)
		}
	}
	ops, err := traceFUSE(at.t.dir, func() error { return app.load(ctx, at.srv.addr, n) })
	if err != nil {
		return errCell(err)
	}
	return fmt.Sprintf("%.1f requests: %s", float64(ops.count())/float64(n), ops.byTime(float64(n)))
}

// appsTargets are -cgi-apps' targets unless -targets names others.
var appsTargets = []string{"backing", "loopback", "safefs"}

// runApps runs -cgi-apps or -soak (main's dispatch).
func runApps(log *zap.Logger, stdout, stderr io.Writer, dir string, tnames []string, targetsSet bool, ac *appsConfig, trace, markdown bool) error {
	if ac.n < 1 || ac.staticN < 1 || ac.rounds < 1 || ac.soakFor <= 0 {
		return errors.New("counts and durations must be positive")
	}
	if ac.soak {
		return appsSoak(log, stdout, dir, ac)
	}
	if !targetsSet {
		tnames = appsTargets
	}
	return appsBench(log, stdout, stderr, dir, tnames, ac, trace, markdown)
}

// shrink divides the requests by 10 (-quick).
func (ac *appsConfig) shrink() {
	ac.n, ac.staticN = max(ac.n/10, 1), max(ac.staticN/10, 1)
}

// isSet reports whether the flag name was given.
func isSet(fl *flag.FlagSet, name string) (set bool) {
	fl.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
