package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// safefsBin is the binary under test, built once by TestMain.
var safefsBin string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "safefs-cmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	safefsBin = filepath.Join(dir, "safefs")
	out, err := exec.Command("go", "build", "-o", safefsBin, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build safefs: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

type result struct {
	code   int
	stdout string
	stderr string
}

// runSafefs runs the binary to completion. The timeout only guards against
// a hang (for example a mount that unexpectedly succeeds); it is not part
// of any assertion.
func runSafefs(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, safefsBin, args...)
	cmd.Env = append(os.Environ(), env...)
	return runResult(t, cmd, "safefs", args)
}

// runResult runs cmd to completion and returns its exit code and output;
// a command that cannot be run at all fails the test.
func runResult(t *testing.T, cmd *exec.Cmd, what string, args []string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("run %s %v: %v", what, args, err)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

// tempDir is t.TempDir with symlinks resolved, so it compares equal to
// what the kernel shows in /proc/mounts.
func tempDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	return dir
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := runSafefs(t, nil, args...)
			assert.Equal(t, exitOK, r.code, r.stderr)
			for _, want := range []string{"safefs mount", "safefs recover", "safefs version", "Exit codes"} {
				assert.Contains(t, r.stdout, want)
			}
		})
	}
}

func TestVersionFromLdflags(t *testing.T) {
	old := version
	t.Cleanup(func() { version = old })
	version = "v1.2.3"
	assert.Equal(t, "v1.2.3", versionString())
}

func TestMountHelpListsEveryOption(t *testing.T) {
	options := []string{
		"allow_other", "default_permissions", "ro", "rw", "lock_timeout=DURATION",
		"max_waiters=N", "durability=full|none", "kill_check=on|off", "debug",
		"log_format=console|json", "log_level=debug|info|warn|error",
	}
	defaults := []string{"10s", "256", "default: full", "default: console", "default: info"}
	for _, args := range [][]string{{"mount", "--help"}, {"mount", "-h"}, {"help", "mount"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := runSafefs(t, nil, args...)
			assert.Equal(t, exitOK, r.code, r.stderr)
			for _, want := range append(options, defaults...) {
				assert.Contains(t, r.stdout, want)
			}
		})
	}
}

// refusalDirs is a scratch tree for the refusal tests: a backing dir, a
// mountpoint, a plain file and a path that does not exist.
type refusalDirs struct {
	backing, mnt, file, missing string
}

func newRefusalDirs(t *testing.T) refusalDirs {
	root := tempDir(t)
	d := refusalDirs{
		backing: filepath.Join(root, "backing"),
		mnt:     filepath.Join(root, "mnt"),
		file:    filepath.Join(root, "file"),
		missing: filepath.Join(root, "missing"),
	}
	require.NoError(t, os.MkdirAll(filepath.Join(d.backing, "sub"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(d.mnt, "sub"), 0o755))
	require.NoError(t, os.WriteFile(d.file, nil, 0o644))
	require.NoError(t, os.Symlink(d.backing, filepath.Join(root, "link")))
	return d
}

func TestRefusals(t *testing.T) {
	tests := []struct {
		name string
		args func(d refusalDirs) []string
		env  func(d refusalDirs) []string
		code int
		want string
	}{
		{name: "no command", args: func(refusalDirs) []string { return nil },
			code: exitUsage, want: "missing command"},
		{name: "unknown command", args: func(refusalDirs) []string { return []string{"frobnicate"} },
			code: exitUsage, want: `unknown command "frobnicate"`},
		{name: "mount without args", args: func(refusalDirs) []string { return []string{"mount"} },
			code: exitUsage, want: "BACKING and MOUNTPOINT"},
		{name: "mount one arg", args: func(d refusalDirs) []string { return []string{"mount", d.backing} },
			code: exitUsage, want: "BACKING and MOUNTPOINT"},
		{name: "mount three args", args: func(d refusalDirs) []string { return []string{"mount", d.backing, d.mnt, d.mnt} },
			code: exitUsage, want: "BACKING and MOUNTPOINT"},
		{name: "unknown flag", args: func(d refusalDirs) []string { return []string{"mount", "-x", d.backing, d.mnt} },
			code: exitUsage, want: "unknown flag -x"},
		{name: "-o without value", args: func(d refusalDirs) []string { return []string{"mount", d.backing, d.mnt, "-o"} },
			code: exitUsage, want: "-o needs a value"},
		{name: "unknown option", args: func(d refusalDirs) []string { return []string{"mount", "-o", "bogus", d.backing, d.mnt} },
			code: exitUsage, want: `unknown option "bogus"`},
		{name: "unknown option after args", args: func(d refusalDirs) []string { return []string{"mount", d.backing, d.mnt, "-o", "ro,bogus"} },
			code: exitUsage, want: `unknown option "bogus"`},
		{name: "bad lock_timeout", args: func(d refusalDirs) []string { return []string{"mount", "-o", "lock_timeout=soon", d.backing, d.mnt} },
			code: exitUsage, want: "lock_timeout"},
		{name: "zero lock_timeout", args: func(d refusalDirs) []string { return []string{"mount", "-o", "lock_timeout=0s", d.backing, d.mnt} },
			code: exitUsage, want: "lock_timeout"},
		{name: "lock_timeout without value", args: func(d refusalDirs) []string { return []string{"mount", "-o", "lock_timeout", d.backing, d.mnt} },
			code: exitUsage, want: "lock_timeout needs a value"},
		{name: "bad max_waiters", args: func(d refusalDirs) []string { return []string{"mount", "-o", "max_waiters=0", d.backing, d.mnt} },
			code: exitUsage, want: "max_waiters"},
		{name: "bad durability", args: func(d refusalDirs) []string { return []string{"mount", "-o", "durability=maybe", d.backing, d.mnt} },
			code: exitUsage, want: "durability"},
		{name: "bad kill_check", args: func(d refusalDirs) []string { return []string{"mount", "-o", "kill_check=yes", d.backing, d.mnt} },
			code: exitUsage, want: "kill_check"},
		{name: "bad log_format", args: func(d refusalDirs) []string { return []string{"mount", "-o", "log_format=xml", d.backing, d.mnt} },
			code: exitUsage, want: "log_format"},
		{name: "bad log_level", args: func(d refusalDirs) []string { return []string{"mount", "-o", "log_level=fatal", d.backing, d.mnt} },
			code: exitUsage, want: "log_level"},
		{name: "flag option with value", args: func(d refusalDirs) []string { return []string{"mount", "-o", "ro=yes", d.backing, d.mnt} },
			code: exitUsage, want: "ro takes no value"},
		{name: "missing backing", args: func(d refusalDirs) []string { return []string{"mount", d.missing, d.mnt} },
			code: exitBadDirs, want: "does not exist"},
		{name: "backing is a file", args: func(d refusalDirs) []string { return []string{"mount", d.file, d.mnt} },
			code: exitBadDirs, want: "not a directory"},
		{name: "missing mountpoint", args: func(d refusalDirs) []string { return []string{"mount", d.backing, d.missing} },
			code: exitBadDirs, want: "does not exist"},
		{name: "mountpoint is a file", args: func(d refusalDirs) []string { return []string{"mount", d.backing, d.file} },
			code: exitBadDirs, want: "not a directory"},
		{name: "mountpoint inside backing", args: func(d refusalDirs) []string { return []string{"mount", d.backing, filepath.Join(d.backing, "sub")} },
			code: exitBadDirs, want: "inside backing directory"},
		{name: "backing inside mountpoint", args: func(d refusalDirs) []string { return []string{"mount", filepath.Join(d.mnt, "sub"), d.mnt} },
			code: exitBadDirs, want: "inside mountpoint"},
		{name: "same dir", args: func(d refusalDirs) []string { return []string{"mount", d.backing, d.backing} },
			code: exitBadDirs, want: "same directory"},
		{name: "same dir through symlink", args: func(d refusalDirs) []string {
			return []string{"mount", d.backing, filepath.Join(filepath.Dir(d.backing), "link")}
		}, code: exitBadDirs, want: "same directory"},
		{name: "same dir through dot-dot", args: func(d refusalDirs) []string {
			return []string{"mount", d.backing, filepath.Join(d.backing, "sub") + "/.."}
		}, code: exitBadDirs, want: "same directory"},
		{name: "no /dev/fuse", args: func(d refusalDirs) []string { return []string{"mount", d.backing, d.mnt} },
			env:  func(d refusalDirs) []string { return []string{devFuseEnv + "=" + d.missing} },
			code: exitNoFuse, want: "does not exist"},
		{name: "recover without args", args: func(refusalDirs) []string { return []string{"recover"} },
			code: exitUsage, want: "exactly one argument"},
		{name: "recover two args", args: func(d refusalDirs) []string { return []string{"recover", d.backing, d.mnt} },
			code: exitUsage, want: "exactly one argument"},
		{name: "recover missing backing", args: func(d refusalDirs) []string { return []string{"recover", d.missing} },
			code: exitBadDirs, want: "does not exist"},
		{name: "recover backing is a file", args: func(d refusalDirs) []string { return []string{"recover", d.file} },
			code: exitBadDirs, want: "not a directory"},
		{name: "version with args", args: func(refusalDirs) []string { return []string{"version", "x"} },
			code: exitUsage, want: "no arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newRefusalDirs(t)
			// Should a refusal ever fail to refuse, do not leave a mount.
			t.Cleanup(func() { unmountIfMounted(t, d.mnt) })
			var env []string
			if tt.env != nil {
				env = tt.env(d)
			}
			r := runSafefs(t, env, tt.args(d)...)
			assert.Equal(t, tt.code, r.code, r.stderr)
			assertOneLine(t, r.stderr, tt.want)
			assert.Empty(t, r.stdout)
		})
	}
}

// assertOneLine checks that a refusal is exactly one "safefs: " line.
func assertOneLine(t *testing.T, stderr, want string) {
	t.Helper()
	assert.True(t, strings.HasPrefix(stderr, "safefs: "), "stderr %q lacks the safefs: prefix", stderr)
	assert.Equal(t, 1, strings.Count(stderr, "\n"), "stderr is not one line: %q", stderr)
	assert.Contains(t, stderr, want)
}
