package main

// scripts/farm-demo.sh, the seeds' web farm on one machine (nginx in
// front of two Apaches, each on its own safefs mount of one BACKING, the
// daemons in cluster mode over one etcd), run with small numbers.

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// runFarm runs the demo with args; it returns its output and exit code.
func runFarm(t *testing.T, args ...string) (string, int) {
	t.Helper()
	clusterPrereqs(t)
	for _, tool := range []string{"etcd", "nginx", "apache2", "ab", "curl"} {
		requireTool(t, tool)
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "scripts", "farm-demo.sh"))
	require.NoError(t, err)
	cmd := exec.Command("bash", append([]string{script}, args...)...)
	cmd.Env = append(os.Environ(), "SAFEFS="+safefsBin, "PATH="+os.Getenv("PATH")+":/usr/sbin:/sbin")
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		require.True(t, ok, "farm-demo.sh: %v\n%s", err, out)
		code = ee.ExitCode()
	}
	t.Logf("farm-demo.sh %v (exit %d):\n%s", args, code, out)
	require.NotEqual(t, 2, code, "farm-demo.sh could not run")
	return string(out), code
}

// The guestbook and the careful counter, 32 requests at a time through
// the balancer: every entry whole and once, every request counted, both
// hosts served.
func TestFarmDemo(t *testing.T) {
	out, code := runFarm(t, "-n", "96", "-c", "32", "--rows", "guestbook,flock")
	require.Equal(t, 0, code, "a row failed:\n%s", out)
	require.Regexp(t, `(?m)^guestbook +96 +96 +0  ok `, out)
	require.Regexp(t, `(?m)^flock +96 +96 +0  ok `, out)
}

// TestFarmDemoNaive: the naive counter across the two hosts under
// Apache, its opens serialized by sessions (rmw=GLOB), each host's
// sessions keyed by the file's path as their etcd lock is: exact.
func TestFarmDemoNaive(t *testing.T) {
	out, code := runFarm(t, "-n", "96", "-c", "32", "--rows", "naive")
	require.Equal(t, 0, code, "a row failed:\n%s", out)
}

// The same farm on the shared directory itself, without safefs: the
// demo can fail, and does (the guestbook's entries written at the same
// time interleave, the naive counter reads a file another request has
// just truncated and starts again).
func TestFarmDemoPlain(t *testing.T) {
	out, code := runFarm(t, "--plain", "-n", "96", "-c", "32", "--rows", "guestbook,naive")
	require.Equal(t, 1, code, "no row failed without safefs:\n%s", out)
	require.Regexp(t, `(?m)^(guestbook|naive) .* FAIL `, out)
}
