package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// commands are the commands dispatch knows, by name.
var commands = []string{"mount", "recover", "status", "version", "help"}

// TestHelpEveryCommand: `safefs help NAME` prints the usage of every
// command, the same as `safefs NAME --help`, and `safefs help` lists them.
func TestHelpEveryCommand(t *testing.T) {
	var names []string
	for name := range commandUsage {
		names = append(names, name)
	}
	slices.Sort(names)
	want := slices.Clone(commands)
	slices.Sort(want)
	assert.Equal(t, want, names, "commands with a usage (right) and dispatch's commands (left)")
	list := runSafefs(t, nil, "help")
	for _, name := range commands {
		t.Run(name, func(t *testing.T) {
			r := runSafefs(t, nil, "help", name)
			require.Equal(t, exitOK, r.code, r.stderr)
			assert.True(t, strings.HasPrefix(r.stdout, "Usage: safefs "+name), "safefs help %s:\n%s", name, r.stdout)
			flag := runSafefs(t, nil, name, "--help")
			assert.Equal(t, exitOK, flag.code, flag.stderr)
			assert.Equal(t, r.stdout, flag.stdout, "safefs %s --help", name)
			assert.Contains(t, list.stdout, "\n  safefs "+name, "safefs help does not list it")
		})
	}
	r := runSafefs(t, nil, "help", "unmount")
	assert.Equal(t, exitUsage, r.code)
	assertOneLine(t, r.stderr, "mount, recover, status, version, help")
}

// TestManualListsEveryCommand: docs/manual.md's Commands section gives
// the usage line of every command.
func TestManualListsEveryCommand(t *testing.T) {
	b, err := os.ReadFile("../../docs/manual.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(b), "\n## Commands\n")
	require.True(t, ok, "docs/manual.md has no Commands section")
	section, _, _ = strings.Cut(section, "\n## ")
	for _, name := range commands {
		assert.Contains(t, section, "\nsafefs "+name, "docs/manual.md's Commands lack safefs %s", name)
	}
}

// TestVersionStamped: the version, commit and date given with -ldflags,
// as the package build stamps them, are what `safefs version` prints.
func TestVersionStamped(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "safefs")
	ldflags := "-X main.version=1.2.3 -X main.commit=0123456789ab -X main.date=2026-12-07T04:43:00Z"
	out, err := exec.Command("go", "build", "-ldflags", ldflags, "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command(bin, "version").Output()
	require.NoError(t, err)
	want := "safefs 1.2.3 (commit 0123456789ab, date 2026-12-07T04:43:00Z, " +
		runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"
	assert.Equal(t, want, string(out))
}

func TestVersionUnstamped(t *testing.T) {
	r := runSafefs(t, nil, "version")
	assert.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "safefs devel ("+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH+")\n", r.stdout)
}
