package main

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/safefs/safefs/testfs"
)

// TestMain lets -syscalls run this test binary as its child daemon.
func TestMain(m *testing.M) {
	if childMain() {
		return
	}
	os.Exit(m.Run())
}

func TestParseCounts(t *testing.T) {
	c, err := parseCounts("syscall              calls\n---------------- ---------\nfsync 4\nread 10\nfdatasync 2\nfutex 7\n---------------- ---------\ntotal 23\n")
	require.NoError(t, err)
	assert.Equal(t, counts{"fsync": 4, "read": 10, "fdatasync": 2, "futex": 7}, c)
	assert.Equal(t, int64(6), c.syncs())
	assert.Equal(t, int64(16), c.fileCalls(), "futex is the runtime's")
	assert.Equal(t, "read 5.0, futex 3.5", c.top(2, 2))
	_, err = parseCounts("")
	assert.Error(t, err)
}

func requireStrace(t *testing.T) {
	if _, err := exec.LookPath("strace"); err == nil {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal("strace is missing and CI is set: -syscalls needs it")
	}
	t.Skip("strace is missing")
}

// TestSyscallCounts runs -syscalls for real (child daemons, strace) and
// checks the per-commit table: the by-hand target's two fsyncs per
// replace and one per append, none with durability=none, some with
// full; and no Go poller registration (epoll_ctl) left on the commit
// path of safefs-none (it came from os.Open of /proc files).
func TestSyscallCounts(t *testing.T) {
	testfs.Available(t)
	requireStrace(t)
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	err := run([]string{"-dir", dir, "-markdown", "-syscalls", "-targets", "byhand,safefs,safefs-none",
		"-workloads", "create-4k,rewrite-4k,append-1m", "-create-n", "20", "-rewrite-n", "20", "-append-n", "20"}, &out, &errOut)
	t.Logf("output:\n%s\nstderr:\n%s", out.String(), errOut.String())
	require.NoError(t, err)
	rows := markdownRows(t, out.String())
	require.Equal(t, []string{"byhand", "safefs", "safefs-none"}, rows["per commit (strace -c)"])
	fsyncs := regexp.MustCompile(`^[0-9.]+ calls, ([0-9.]+) fsyncs$`)
	for name, byHand := range map[string]string{"create-4k": "2.0", "rewrite-4k": "2.0", "append-1m": "1.0"} {
		// The rate row and the count row share the name: the count row is
		// printed last, so it is the one kept.
		cells := rows[name]
		require.Len(t, cells, 3, name)
		got := make([]string, 3)
		for i, c := range cells {
			m := fsyncs.FindStringSubmatch(c)
			require.NotNil(t, m, "%s: %q", name, c)
			got[i] = m[1]
		}
		assert.Equal(t, byHand, got[0], "%s by hand", name)
		assert.NotEqual(t, "0.0", got[1], "%s with durability=full", name)
		assert.Equal(t, "0.0", got[2], "%s with durability=none", name)
	}
	var details int
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "- ") && strings.Contains(l, " on safefs-none: ") {
			details++
			assert.NotContains(t, l, "epoll_ctl", "a descriptor registered with the poller per commit")
		}
	}
	assert.Equal(t, 3, details)
	assert.Regexp(t, `\| create-4k \| .* by hand [0-9.e-]+x\) \|`, out.String())
	assertNoMount(t, dir)
}
