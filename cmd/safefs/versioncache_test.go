package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/testfs"
)

// cache=version, the real daemon and Perl: a reader that has read half
// of a page through the page cache (the kernel holds its pages) reads
// the rest of its version whole after another process rewrote the page
// (open >, close: a commit), and the next reader reads the new version.
func TestVersionCacheDaemon(t *testing.T) {
	versionCacheDaemon(t, "cache=version", 65536)
}

// With passthrough=read too, on a 2 MiB page: the reader reads it from
// the version's backing file (the status counters show the open passed
// through), and keeps its version whole across the rewrite.
func TestVersionCachePassthroughDaemon(t *testing.T) {
	m := versionCacheDaemon(t, "cache=version,passthrough=read", 2<<20)
	assert.Positive(t, statusUntil(t, m, func(fs.Status) bool { return true }).Counters.Passthrough, "opens passed through")
}

// versionCacheDaemon runs the test above with the mount options opts on
// a page of size bytes; it returns the mount point, still mounted.
func versionCacheDaemon(t *testing.T, opts string, size int) string {
	requireFuse(t)
	requireRoot(t)
	requirePerl(t)
	b, m, sync := tempDir(t), tempDir(t), tempDir(t)
	require.NoError(t, os.WriteFile(filepath.Join(b, "page"), []byte(strings.Repeat("a", size)), 0o644))
	d := launchMount(t, exec.Command(safefsBin, "mount", "-o", opts, b, m), m)
	d.waitMounted(t)
	page, goOn := filepath.Join(m, "page"), filepath.Join(sync, "go")

	r := startProc(t, exec.Command("perl", "-e", `$| = 1;
		open(F, "<", $ARGV[0]) or die "open: $!";
		read(F, my $head, $ARGV[2] / 2) == $ARGV[2] / 2 or die "read: $!";
		print "half\n";
		select(undef, undef, undef, 0.05) until -e $ARGV[1];
		local $/; my $all = $head . <F>;
		printf "%d %d\n", length($all), ($all =~ tr/a//);
		sleep 600`, page, goOn, strconv.Itoa(size)))
	waitOut(t, r, "half")
	testfs.RequireCached(t, page)

	out, err := exec.Command("perl", "-e", `open(F, ">", $ARGV[0]) or die "open: $!"; print F "b" x ($ARGV[1] + 4464); close(F) or die "close: $!"`, page, strconv.Itoa(size)).CombinedOutput()
	require.NoError(t, err, "the writer: %s", out)
	require.NoError(t, os.WriteFile(goOn, nil, 0o644))
	waitOut(t, r, fmt.Sprintf("%d %d", size, size))
	kill(t, r)
	got, err := os.ReadFile(page)
	require.NoError(t, err)
	require.True(t, string(got) == strings.Repeat("b", size+4464), "a new reader: %d bytes", len(got))
	return m
}
