package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/journal"
)

func runRecover(args []string, stdout, stderr io.Writer) error {
	if len(args) == 1 && isHelpFlag(args[0]) {
		printRecoverUsage(stdout)
		return nil
	}
	if len(args) != 1 {
		return failf(exitUsage, "recover needs exactly one argument, BACKING, got %d (see safefs --help)", len(args))
	}
	if err := checkDir("backing directory", args[0]); err != nil {
		return err
	}
	backing, err := resolve("backing directory", args[0])
	if err != nil {
		return err
	}
	log, err := newLogger("console", "info", stderr)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // syncing a pipe or tty fails harmlessly
	opts := fs.DefaultOptions()
	opts.Log = log
	sum, err := fs.Recover(backing, opts)
	if err != nil {
		return recoverError(err)
	}
	printSummary(stdout, sum)
	return nil
}

func recoverError(err error) error {
	if errors.Is(err, fs.ErrBusy) {
		return failf(exitBusy, "%v", err)
	}
	return failf(exitRecover, "recover failed: %v", err)
}

func printSummary(w io.Writer, s journal.Summary) {
	fmt.Fprintf(w, "records:     %d\n", s.Records)
	fmt.Fprintf(w, "completed:   %d\n", s.Completed)
	fmt.Fprintf(w, "rolled back: %d\n", s.RolledBack)
	fmt.Fprintf(w, "orphans:     %d\n", s.Orphans)
	fmt.Fprintf(w, "refused:     %d\n", s.Refused)
	fmt.Fprintf(w, "torn:        %d\n", s.Torn)
}
