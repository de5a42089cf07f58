// Command testreport runs go test and says at the end which tests were
// skipped, and why: without CI set, a test whose tool, user or device
// is missing skips (CI makes that a failure), and go test alone prints
// ok for its package all the same.
//
//	go run ./internal/testreport [go test flags] [packages]
//
// It runs `go test -json` with the arguments given, prints what go test
// prints without -v (each package's result, and the output of a test
// that fails), then every skipped test with its reason, grouped by
// reason. It exits with go test's status (0 when go test passed,
// whatever was skipped).
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
)

func main() {
	cmd := exec.Command("go", append([]string{"test", "-json"}, os.Args[1:]...)...)
	cmd.Stdin, cmd.Stderr = os.Stdin, os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	skips := report(out, os.Stdout)
	err = cmd.Wait()
	printSkips(os.Stdout, skips)
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		os.Exit(exit.ExitCode())
	case err != nil:
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output lines
	Test       string
	Output     string
}

// skip is a test that was skipped.
type skip struct {
	Package, Test, Reason string
}

// report reads go test -json's events from r, writes to w what go test
// prints without -v, and returns the tests skipped.
func report(r io.Reader, w io.Writer) []skip {
	var skips []skip
	outputs := map[[2]string][]string{} // by package and test
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if json.Unmarshal(line, &e) != nil || e.Action == "" {
			fmt.Fprintf(w, "%s\n", line) // not an event: go test's own words
			continue
		}
		key := [2]string{e.Package, e.Test}
		switch {
		case e.Action == "build-output":
			fmt.Fprint(w, e.Output)
		case e.Test == "" && e.Action == "output":
			if e.Output != "PASS\n" { // go test without -v prints only its ok line
				fmt.Fprint(w, e.Output) // ok, FAIL, a panic outside any test
			}
		case e.Action == "output":
			outputs[key] = append(outputs[key], e.Output)
		case e.Action == "fail" && e.Test != "":
			for _, o := range outputs[key] {
				if !strings.HasPrefix(strings.TrimSpace(o), "=== ") {
					fmt.Fprint(w, o)
				}
			}
			delete(outputs, key)
		case e.Action == "skip" && e.Test != "":
			skips = append(skips, skip{Package: e.Package, Test: e.Test, Reason: reason(outputs[key])})
			delete(outputs, key)
		case e.Action == "pass" && e.Test != "":
			delete(outputs, key)
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(w, "testreport: reading go test's output:", err)
	}
	return skips
}

// logPrefix is t.Log's "file.go:12: ".
var logPrefix = regexp.MustCompile(`^[\w.-]+\.go:\d+: `)

// reason is what a skipped test logged, without go test's own lines.
func reason(output []string) string {
	var lines []string
	for _, o := range output {
		s := strings.TrimSpace(o)
		if s == "" || strings.HasPrefix(s, "=== ") || strings.HasPrefix(s, "--- SKIP") {
			continue
		}
		lines = append(lines, logPrefix.ReplaceAllString(s, ""))
	}
	if len(lines) == 0 {
		return "(no reason given)"
	}
	// The reason is the last thing a skipped test logs (t.Skip's).
	return lines[len(lines)-1]
}

// printSkips writes the skipped tests grouped by reason, the largest
// group first.
func printSkips(w io.Writer, skips []skip) {
	if len(skips) == 0 {
		fmt.Fprintln(w, "testreport: no test skipped")
		return
	}
	byReason := map[string][]skip{}
	for _, s := range skips {
		byReason[s.Reason] = append(byReason[s.Reason], s)
	}
	reasons := make([]string, 0, len(byReason))
	for r := range byReason {
		reasons = append(reasons, r)
	}
	slices.SortFunc(reasons, func(a, b string) int {
		if d := len(byReason[b]) - len(byReason[a]); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	fmt.Fprintf(w, "\ntestreport: SKIPPED, %d in all (go test printed ok for their packages all the same), by reason:\n", len(skips))
	for _, r := range reasons {
		g := byReason[r]
		fmt.Fprintf(w, "  %d: %s\n", len(g), r)
		for i, s := range g {
			if i == 5 {
				fmt.Fprintf(w, "      ... and %d more\n", len(g)-i)
				break
			}
			fmt.Fprintf(w, "      %s %s\n", s.Package, s.Test)
		}
	}
	if os.Getenv("CI") == "" {
		fmt.Fprintln(w, "testreport: CI is not set: tests whose tool, user or /dev/fuse is missing skip (docs/testing.md)")
	}
}
