// Package loglimit keeps a flood of failures from flooding the log.
package loglimit

import (
	"fmt"
	"sync"
	"time"
)

// Limit lets through the first few lines of a kind per interval, so
// that a flood of failures cannot flood the log; the next line let
// through says how many were left out.
type Limit struct {
	mu         sync.Mutex
	start      time.Time
	n, skipped int
}

const (
	logInterval = 10 * time.Second
	logBurst    = 10
)

// Allow reports whether to log now, and how many lines were left out
// since the last one logged.
func (l *Limit) Allow() (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := time.Now(); now.Sub(l.start) > logInterval {
		l.start, l.n = now, 0
	}
	if l.n >= logBurst {
		l.skipped++
		return false, 0
	}
	l.n++
	skipped := l.skipped
	l.skipped = 0
	return true, skipped
}

// Path shortens a path for a log line: a path may be 64 KiB long, and
// a flood of failures on it must not flood the log.
func Path(p string) string {
	const head, tail = 64, 192
	if len(p) <= head+tail+32 {
		return p
	}
	return p[:head] + fmt.Sprintf("...(%d bytes)...", len(p)) + p[len(p)-tail:]
}
