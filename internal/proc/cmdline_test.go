package proc

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A request's class is its method and the sorted names of its query's
// parameters, never their values, bounded in number and length.
func TestClassOf(t *testing.T) {
	long := strings.Repeat("n", 40)
	for _, tc := range []struct{ method, query, want string }{
		{"", "a=1", ""},
		{"GET", "", "GET"},
		{"POST", "b=2&a=1;a=3", "POST ?a&b"},
		{"GET", "=x&&mode&page=2", "GET ?mode&page"},
		{"GET", long + "=1", "GET ?" + long[:maxQueryName]},
		{"GET", "a&b&c&d&e&f&g&h&i", "GET ?a&b&c&d&e&f&g&h&..."},
		{strings.Repeat("M", 17), "a", ""},
	} {
		assert.Equal(t, tc.want, classOf(tc.method, tc.query), "classOf(%q, %q)", tc.method, tc.query)
	}
}

// sleeper starts a child with env and args and returns its pid.
func sleeper(t *testing.T, env []string, args ...string) uint32 {
	t.Helper()
	cmd := exec.Command("sleep", args...)
	cmd.Env = env
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := uint32(cmd.Process.Pid)
	// The child is ours until it has exec'd sleep: wait for its exe, and
	// for its arguments, which exec sets up after the exe (until then
	// cmdline reads empty).
	require.Eventually(t, func() bool {
		exe, _ := os.Readlink(pidPath(pid, "exe"))
		args, _ := os.ReadFile(pidPath(pid, "cmdline"))
		return filepath.Base(exe) == "sleep" && len(args) > 0
	}, 10*time.Second, time.Millisecond)
	return pid
}

// What the command line gives: the program learned (its executable and
// first non-option argument), the command line for events and logs,
// and a CGI request's class from its environment.
func TestProgramAndCmdline(t *testing.T) {
	pid := sleeper(t, []string{"REQUEST_METHOD=POST", "QUERY_STRING=page=2&mode=x", "OTHER=1"}, "--", "30")
	exe, err := os.Readlink(pidPath(pid, "exe"))
	require.NoError(t, err)
	assert.Equal(t, exe+" 30", Program(pid))
	assert.Equal(t, "sleep -- 30", Cmdline(pid))
	assert.Equal(t, "sleep -- 30", ShortCmdline(pid))
	assert.Equal(t, "POST ?mode&page", RequestFeatures(pid))

	plain := sleeper(t, nil, "30")
	assert.Equal(t, "", RequestFeatures(plain), "not a CGI request")

	assert.Equal(t, "", Program(0))
	assert.Equal(t, "", Cmdline(0))
	assert.Equal(t, "", ShortCmdline(0))
	assert.Equal(t, "", RequestFeatures(0))
}

// A long command line is cut for a log line.
func TestShortCmdline(t *testing.T) {
	pid := sleeper(t, nil, append([]string{"30"}, strings.Fields(strings.Repeat("0 ", 150))...)...)
	got := ShortCmdline(pid)
	assert.Len(t, got, 203)
	assert.True(t, strings.HasPrefix(got, "sleep 30 0 0 "))
	assert.True(t, strings.HasSuffix(got, "..."))
}
