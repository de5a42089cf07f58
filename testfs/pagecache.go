package testfs

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// RequireCached fails unless the kernel caches pages of path (fincore):
// it is read through the page cache, not direct I/O, which caches none.
// Without fincore it skips, or fails under CI.
func RequireCached(t testing.TB, path string) {
	t.Helper()
	if _, err := exec.LookPath("fincore"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("fincore not installed")
		}
		t.Skip("fincore not installed")
	}
	out, err := exec.Command("fincore", "--noheadings", "--output", "PAGES", path).CombinedOutput()
	require.NoError(t, err, "%s", out)
	pages, err := strconv.Atoi(strings.TrimSpace(string(out)))
	require.NoError(t, err, "%s", out)
	require.Positive(t, pages, "pages of %s cached", path)
}
