package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/safefs/safefs/testfs"
)

// cache=version, the real daemon and Perl: a reader that has read half
// of a page through the page cache (the kernel holds its pages) reads
// the rest of its version whole after another process rewrote the page
// (open >, close: a commit), and the next reader reads the new version.
func TestVersionCacheDaemon(t *testing.T) {
	requireFuse(t)
	requireRoot(t)
	requirePerl(t)
	b, m, sync := tempDir(t), tempDir(t), tempDir(t)
	require.NoError(t, os.WriteFile(filepath.Join(b, "page"), []byte(strings.Repeat("a", 65536)), 0o644))
	d := launchMount(t, exec.Command(safefsBin, "mount", "-o", "cache=version", b, m), m)
	d.waitMounted(t)
	page, goOn := filepath.Join(m, "page"), filepath.Join(sync, "go")

	r := startProc(t, exec.Command("perl", "-e", `$| = 1;
		open(F, "<", $ARGV[0]) or die "open: $!";
		read(F, my $head, 32768) == 32768 or die "read: $!";
		print "half\n";
		select(undef, undef, undef, 0.05) until -e $ARGV[1];
		local $/; my $all = $head . <F>;
		printf "%d %d\n", length($all), ($all =~ tr/a//);
		sleep 600`, page, goOn))
	waitOut(t, r, "half")
	testfs.RequireCached(t, page)

	out, err := exec.Command("perl", "-e", `open(F, ">", $ARGV[0]) or die "open: $!"; print F "b" x 70000; close(F) or die "close: $!"`, page).CombinedOutput()
	require.NoError(t, err, "the writer: %s", out)
	require.NoError(t, os.WriteFile(goOn, nil, 0o644))
	waitOut(t, r, "65536 65536")
	kill(t, r)
	got, err := os.ReadFile(page)
	require.NoError(t, err)
	require.Equal(t, strings.Repeat("b", 70000), string(got), "a new reader")
}
