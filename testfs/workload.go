package testfs

// Helpers for workloads of many script processes, shared by the contract
// suite and by other packages' tests (RunUnlockPatterns).

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// wwwDir makes directory dir, owned by www (the scripts' user).
func wwwDir(t *testing.T, www *Cred, dir string) {
	t.Helper()
	require.NoError(t, os.Mkdir(dir, 0o755))
	require.NoError(t, os.Chown(dir, int(www.Uid), int(www.Gid)))
}

// runAll runs the scripts concurrently to their ends and returns their
// outputs. Any failed run fails the test.
func runAll(t *testing.T, ps []Perl) []string {
	t.Helper()
	outs := make([]string, len(ps))
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() { outs[i], errs[i] = p.Run() })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	return outs
}

// anomalies returns the lines of the outputs that are not "DONE ..."
// lines, prefixed with the process index, at most 20 of them, and their
// count.
func anomalies(outs []string) ([]string, int) {
	var bad []string
	n := 0
	for i, out := range outs {
		for line := range strings.Lines(out) {
			line = strings.TrimRight(line, "\n")
			if line == "" || strings.HasPrefix(line, "DONE") {
				continue
			}
			n++
			if len(bad) < 20 {
				bad = append(bad, fmt.Sprintf("proc %d: %s", i, line))
			}
		}
	}
	return bad, n
}

func assertNoAnomalies(t *testing.T, outs []string) {
	t.Helper()
	if bad, n := anomalies(outs); n > 0 {
		t.Errorf("%d anomalies, first ones:\n%s", n, strings.Join(bad, "\n"))
	}
}

// counter parses a counter file.
func counter(t *testing.T, b []byte) int {
	t.Helper()
	m := regexp.MustCompile(`\A(\d+)\n\z`).FindSubmatch(b)
	require.NotNil(t, m, "counter file is %q", b)
	n, _ := strconv.Atoi(string(m[1]))
	return n
}
