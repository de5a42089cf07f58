package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// longAppender keeps FILE open for append and serves requests on stdin:
// "I" writes line I whole ("ok I"), "I half" its first half ("half I"),
// "I rest" the rest ("ok I"), "close" closes FILE ("closed"). Every third
// line is 20 KB.
const longAppender = `
my ($file, $tag) = @ARGV;
$| = 1;
open(my $f, '>>', $file) or die "open: $!";
while (my $req = <STDIN>) {
    chomp $req;
    if ($req eq 'close') { close($f) or die "close: $!"; print "closed\n"; next }
    my ($i, $how) = split / /, $req;
    my $line = sprintf("%s-%04d-%s\n", $tag, $i, ($i % 3 == 0 ? "y" x 20000 : "x" x 60));
    my $h = int(length($line) / 2);
    my @w = !defined $how ? ($line) : $how eq 'half' ? (substr($line, 0, $h)) : (substr($line, $h));
    defined syswrite($f, $_) or die "write: $!" for @w;
    print defined $how && $how eq 'half' ? "half $i\n" : "ok $i\n";
}`

var clusterLine = regexp.MustCompile(`^([ab])-(\d{4})-(x+|y+)$`)

// longProc is a running longAppender.
type longProc struct {
	*proc
	in io.WriteCloser
}

func startLongAppender(t *testing.T, file, tag string) *longProc {
	t.Helper()
	cmd := exec.Command("perl", "-e", longAppender, file, tag)
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	t.Cleanup(func() { in.Close() })
	return &longProc{startProc(t, cmd), in}
}

// do sends a request and waits for its answer.
func (p *longProc) do(t *testing.T, req, answer string) {
	t.Helper()
	_, err := fmt.Fprintln(p.in, req)
	require.NoError(t, err)
	waitLine(t, p.proc, answer)
}

// readWhole reads file and requires whole lines: old, then lines of the
// appenders, each whole. It returns those lines.
func readWhole(t *testing.T, file, old string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	rest, ok := strings.CutPrefix(string(data), old)
	require.True(t, ok, "%s does not start with its old lines", file)
	if rest == "" {
		return nil
	}
	require.True(t, strings.HasSuffix(rest, "\n"), "%s: a partial line is visible", file)
	lines := strings.Split(strings.TrimSuffix(rest, "\n"), "\n")
	for _, l := range lines {
		m := clusterLine.FindStringSubmatch(l)
		require.NotNil(t, m, "%s: a torn or mixed line: %q", file, l[:min(len(l), 60)])
		i, _ := strconv.Atoi(m[2])
		want := strings.Repeat("x", 60)
		if i%3 == 0 {
			want = strings.Repeat("y", 20000)
		}
		require.Equal(t, want, m[3], "%s: line %q is torn", file, l[:9])
	}
	return lines
}

// waitVisibleThrough polls file (through a mount) until it holds the
// line tag-i, checking every read.
func waitVisibleThrough(t *testing.T, file, old, tag string, i int) {
	t.Helper()
	prefix := fmt.Sprintf("%s-%04d-", tag, i)
	deadline := time.Now().Add(waitLimit) // a hang guard only
	for {
		for _, l := range readWhole(t, file, old) {
			if strings.HasPrefix(l, prefix) {
				return
			}
		}
		require.True(t, time.Now().Before(deadline), "%s%s not visible through %s after %v while its appender lives", prefix, "...", file, waitLimit)
		time.Sleep(20 * time.Millisecond)
	}
}

// Long-lived appenders in cluster mode: the lines one writes through a
// daemon become visible through the other while it lives (each publish
// an append under the cluster's lock; pending bytes, and a partial line
// held back, in named staging files); a daemon killed in the middle of
// a publish is settled at its restart by the staging file its record
// names: the file is whole lines again.
func TestClusterLongLivedAppenders(t *testing.T) {
	clusterPrereqs(t)
	e := startEtcd(t)
	backing := tempDir(t)
	const old = "old\n"
	require.NoError(t, os.WriteFile(filepath.Join(backing, "log"), []byte(old), 0o644))
	p1, m1 := startNode(t, e, backing, "n1")
	_, m2 := startNode(t, e, backing, "n2")
	l1, l2 := filepath.Join(m1, "log"), filepath.Join(m2, "log")
	a := startLongAppender(t, l1, "a")
	b := startLongAppender(t, l2, "b")
	for i := 1; i <= 3; i++ {
		a.do(t, fmt.Sprint(i), fmt.Sprintf("ok %d\n", i))
		b.do(t, fmt.Sprint(i), fmt.Sprintf("ok %d\n", i))
	}
	waitVisibleThrough(t, l2, old, "a", 3)
	waitVisibleThrough(t, l1, old, "b", 3)
	a.do(t, "4 half", "half 4\n")
	b.do(t, "4", "ok 4\n")
	waitVisibleThrough(t, l1, old, "b", 4) // never a-0004 half (readWhole)
	waitVisibleThrough(t, l2, old, "b", 4)
	a.do(t, "4 rest", "ok 4\n")
	waitVisibleThrough(t, l2, old, "a", 4)
	a.do(t, "close", "closed\n")
	b.do(t, "close", "closed\n")
	lines := readWhole(t, filepath.Join(backing, "log"), old)
	assert.Len(t, lines, 8, "each line once")

	// n1 again, to die in the middle of a publish (append-half): the
	// appender never closes.
	stopMount(t, p1)
	before, err := os.ReadFile(filepath.Join(backing, "log"))
	require.NoError(t, err)
	p1 = startNodeAt(t, e, backing, m1, "n1", crashEnv+"=append-half")
	c := startLongAppender(t, l1, "a")
	_, err = io.WriteString(c.in, "5\n6\n7 half\n") // 6 is 20 KB
	require.NoError(t, err)
	waitKilled(t, p1)
	require.Contains(t, p1.out.String(), "crash point reached")
	detach(t, m1)
	require.NoError(t, c.cmd.Process.Kill())
	p1 = startNodeAt(t, e, backing, m1, "n1")
	require.Contains(t, p1.out.String(), `"records": 1`, "the cut-off publish's record")
	left, err := os.ReadDir(filepath.Join(backing, ".safefs", "nodes", "n1", "staging"))
	require.NoError(t, err)
	require.Empty(t, left, "staging files left")
	after, err := os.ReadFile(filepath.Join(backing, "log"))
	require.NoError(t, err)
	require.Equal(t, string(before), string(after), "the cut-off publish is cut back")
	readWhole(t, l2, old)
}
