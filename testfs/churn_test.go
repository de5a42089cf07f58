package testfs

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A busy site's churn (four Perl processes rewriting, reading, locking,
// renaming and removing 50 files, pausing past the entry timeout)
// leaves no removed file open in the daemon once the files are gone and
// the kernel forgot them, and its tables are back to what they were.
// Before the fixes of 2026-12-06, evening, hundreds of removed versions
// stayed open (their blocks held) until unmount.
func TestChurnLeavesNothingOpen(t *testing.T) {
	m := New(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to make the kernel forget")
	}
	base := m.Gauges().KnownFiles
	dir := m.Path("churn")
	require.NoError(t, os.Mkdir(dir, 0o755))
	ps := make([]Perl, 4)
	for i := range ps {
		ps[i] = Perl{Script: "churn.pl", Args: []string{dir, "3", strconv.Itoa(i + 1), "50"}}
	}
	for i, out := range runAll(t, ps) {
		assert.Equal(t, "DONE\n", out, "process %d", i)
	}
	require.NoError(t, os.RemoveAll(dir))
	settled := func() bool { return len(removedOpen(m.Backing)) == 0 && m.Gauges().KnownFiles <= base }
	deadline := time.Now().Add(5 * time.Second)
	for !settled() && time.Now().Before(deadline) {
		require.NoError(t, os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0))
		time.Sleep(100 * time.Millisecond)
	}
	held := removedOpen(m.Backing)
	assert.Empty(t, held, "%d removed files the daemon (this process) still holds open, such as %q",
		len(held), held[:min(len(held), 3)])
	assert.LessOrEqual(t, m.Gauges().KnownFiles, base, "logical files left in the daemon's tables")
}

// removedOpen lists this process's descriptors of removed files below
// backing, staging files aside.
func removedOpen(backing string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		l, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err == nil && strings.HasPrefix(l, backing+"/") && strings.HasSuffix(l, " (deleted)") &&
			!strings.Contains(l, "/.safefs/") {
			out = append(out, l)
		}
	}
	return out
}
