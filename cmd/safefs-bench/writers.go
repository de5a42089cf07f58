package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// writersRow is the row writers-k: k goroutines, each on its own file,
// rewrite 4 KiB (open >, write, close) until cfg.writersN commits are
// made in all. The row compares 1, 4 and 16 (group commit, no global
// lock on the commit path).
func writersRow(k int) workload {
	return workload{
		name:    fmt.Sprintf("writers-%d", k),
		unit:    "commits/s",
		setup:   func(e *env) error { return writersSetup(e, k) },
		run:     func(e *env) (float64, error) { return writersRun(e, k) },
		commits: true,
	}
}

func writerName(i int) string { return fmt.Sprintf("w%02d", i) }

func writersSetup(e *env, k int) error {
	for i := range k {
		if err := writeFile(filepath.Join(e.raw, writerName(i)), unix.O_CREAT, block4k); err != nil {
			return err
		}
	}
	return nil
}

// writersRun runs the k writers at once and returns the commits made.
func writersRun(e *env, k int) (float64, error) {
	n := e.cfg.writersN
	errs := make([]error, k)
	var wg sync.WaitGroup
	for i := range k {
		wg.Go(func() {
			for range share(n, k, i) {
				if errs[i] = e.ctx.Err(); errs[i] != nil {
					return
				}
				if errs[i] = e.commit(writerName(i), unix.O_CREAT|unix.O_TRUNC, block4k); errs[i] != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	return float64(n), errors.Join(errs...)
}

// share is writer i's part of n commits among k writers.
func share(n, k, i int) int {
	if i < n%k {
		return n/k + 1
	}
	return n / k
}
