package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// rssSeries is the daemon's RSS sampled during the soak, in KiB.
type rssSeries struct {
	mu      sync.Mutex
	samples []int64
	err     error
}

func (s *rssSeries) add(kib int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.err = errors.Join(s.err, err)
		return
	}
	s.samples = append(s.samples, kib)
}

// soakSummary is what the soak row shows of the samples: the first
// (before any load), the largest, the last, and the growth first to
// last and first to largest.
type soakSummary struct{ start, max, end int64 }

func summarize(samples []int64) (soakSummary, error) {
	if len(samples) < 2 {
		return soakSummary{}, fmt.Errorf("%d RSS samples: too few", len(samples))
	}
	s := soakSummary{start: samples[0], end: samples[len(samples)-1]}
	for _, v := range samples {
		s.max = max(s.max, v)
	}
	return s, nil
}

// within reports whether the RSS stayed within limit KiB of its start.
func (s soakSummary) within(limit int64) bool { return s.max-s.start <= limit }

func (s soakSummary) String() string {
	verdict := "within"
	if !s.within(soakLimit) {
		verdict = "NOT within"
	}
	return fmt.Sprintf("RSS start %.1f MiB, max %.1f, end %.1f: growth %+.1f MiB at the end, %+.1f at the max (%s %d MiB)",
		mib(s.start), mib(s.max), mib(s.end), mib(s.end-s.start), mib(s.max-s.start), verdict, soakLimit>>10)
}

// sample reads pid's RSS every interval until ctx ends, and once more
// then.
func (s *rssSeries) sample(ctx context.Context, pid int, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			s.add(vmKiB(pid, "VmRSS"))
			return
		case <-tick.C:
			s.add(vmKiB(pid, "VmRSS"))
		}
	}
}

// soakCounts are the soak's requests, the mixes that failed and the
// first failure.
type soakCounts struct {
	requests, mixes, failed int
	first                   error
}

func (c soakCounts) String() string {
	if c.failed == 0 {
		return fmt.Sprintf("%d requests in %d mixes, every one kept", c.requests, c.mixes)
	}
	return fmt.Sprintf("%d requests in %d mixes, %d runs failed, first: %v", c.requests, c.mixes, c.failed, c.first)
}

// appsSoak runs the cgi-apps mix on safefs for ac.soakFor and prints
// the daemon's RSS; an error if it grew more than soakLimit or a run
// failed.
func appsSoak(log *zap.Logger, stdout io.Writer, dir string, ac *appsConfig) (err error) {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer cancel()
	ats, stop, err := startApps(ctx, log, dir, []string{"safefs"})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, stop()) }()
	at := ats[0]
	var rss rssSeries
	rss.add(vmKiB(at.t.pid, "VmRSS"))
	sctx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() { defer close(sampled); rss.sample(sctx, at.t.pid, ac.soakEvery) }()
	start := time.Now()
	c := soakMix(ctx, log, at, ac)
	took := time.Since(start).Round(time.Second)
	stopSampling()
	<-sampled
	if ctx.Err() != nil {
		return errors.New("interrupted")
	}
	if rss.err != nil {
		return rss.err
	}
	sum, err := summarize(rss.samples)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "soak: safefs, %v of the cgi-apps mix (-soak-for %v; a mix begun goes on to its end): %v; %d samples, every %v: %v\n",
		took, ac.soakFor, c, len(rss.samples), ac.soakEvery, sum)
	switch {
	case c.failed > 0:
		return fmt.Errorf("%d runs failed", c.failed)
	case !sum.within(soakLimit):
		return fmt.Errorf("the daemon's RSS grew by %.1f MiB", mib(sum.max-sum.start))
	}
	return nil
}

// soakMix runs the apps in turn until ac.soakFor has passed.
func soakMix(ctx context.Context, log *zap.Logger, at *appsTarget, ac *appsConfig) soakCounts {
	var c soakCounts
	for end := time.Now().Add(ac.soakFor); time.Now().Before(end) && ctx.Err() == nil; c.mixes++ {
		for _, app := range cgiApps {
			s := at.runApp(ctx, app, ac.requests(app))
			c.requests += ac.requests(app)
			if s.err != nil {
				c.failed++
				if c.first == nil {
					c.first = fmt.Errorf("%s: %w", app.name, s.err)
				}
			}
		}
		rss, _ := vmKiB(at.t.pid, "VmRSS")
		log.Info("soak", zap.Int("mix", c.mixes), zap.Int("requests", c.requests), zap.Float64("rss MiB", mib(rss)))
	}
	return c
}
