package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// naiveCounter is the unlocked read-modify-write of old CGI counters:
// open "<", read, close, open ">", write n+1, close. An open
// that fails is the script's death, as in a CGI script that dies.
const naiveCounter = `
my ($file, $n) = @ARGV;
for (1 .. $n) {
    open(F, "<$file") or die "open <$file: $!\n";
    my $c = <F>;
    close(F);
    open(F, ">$file") or die "open >$file: $!\n";
    print F $c + 1, "\n";
    close(F) or die "close $file: $!\n";
}
`

func counterSetup(e *env) error {
	return writeFile(e.path("count"), unix.O_CREAT|unix.O_TRUNC, []byte("0\n"))
}

// counterRun runs the processes at once on one file and returns the
// increments the file kept.
func counterRun(e *env) (float64, error) {
	p := e.path("count")
	if err := runPerls(e, "counter", e.cfg.counterProcs, naiveCounter, p, strconv.Itoa(e.cfg.counterRuns)); err != nil {
		return 0, err
	}
	n, err := readCount(p)
	return float64(n), err
}

// runPerls runs n Perl processes of prog with args at once and waits
// for all of them; what is the workload's name in errors.
func runPerls(e *env, what string, n int, prog string, args ...string) error {
	return runProcs(e, what, n, "perl", append([]string{"-e", prog}, args...)...)
}

// runProcs runs n processes of program with args at once and waits for
// all of them; what is the workload's name in errors.
func runProcs(e *env, what string, n int, program string, args ...string) error {
	cmds := make([]*exec.Cmd, n)
	outs := make([]bytes.Buffer, n)
	var errs []error
	for i := range cmds {
		cmds[i] = exec.CommandContext(e.ctx, program, args...)
		cmds[i].Stdout, cmds[i].Stderr = &outs[i], &outs[i]
		if err := cmds[i].Start(); err != nil {
			errs = append(errs, err)
			cmds[i] = nil
		}
	}
	for i, c := range cmds {
		if c == nil {
			continue
		}
		if err := c.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("%s process %d: %w: %s", what, i, err, strings.TrimSpace(outs[i].String())))
		}
	}
	return errors.Join(errs...)
}

// errTorn is a counter file that holds no number: two unlocked writers
// overlapped (the plain directory's way to lose a counter).
var errTorn = errors.New("torn")

// readCount reads the number a counter file holds.
func readCount(p string) (int, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSuffix(string(b), "\n"))
	if err != nil {
		return 0, fmt.Errorf("%s holds %q, not a count: %w", p, b, errTorn)
	}
	return n, nil
}

func counterTotal(c config) float64 { return float64(c.counterProcs * c.counterRuns) }

func counterTitle(c config) string {
	return fmt.Sprintf("naive counter, %d x %d: kept / expected", c.counterProcs, c.counterRuns)
}
