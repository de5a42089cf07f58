package main

import (
	"bytes"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/safefs/safefs/testfs"
)

// TestSessionRows runs the session rows briefly on the plain directory,
// safefs and safefs without sessions: on safefs (rmw=auto, taught by
// the untimed first requests) the servlet and the posts lose nothing;
// the views rows are rates compared with safefs-rmw-off.
func TestSessionRows(t *testing.T) {
	testfs.Available(t)
	requirePerl(t)
	for _, tool := range []string{"javac", "apache2"} {
		if _, err := exec.LookPath(tool); err != nil {
			if _, serr := os.Stat("/usr/sbin/" + tool); serr == nil {
				continue
			}
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is missing, and CI is set (.ci/run installs it)", tool)
			}
			t.Skip(tool, " is missing")
		}
	}
	dir := wwwDir(t)
	t.Setenv("TMPDIR", dir)
	var out, errOut bytes.Buffer
	err := run([]string{"-dir", dir, "-markdown", "-targets", "backing,safefs,safefs-rmw-off",
		"-workloads", "servlet,cgi-views,cgi-bbs", "-servlet-runs", "5", "-views-n", "32", "-bbs-n", "50"}, &out, &errOut)
	t.Logf("table:\n%s\nstderr:\n%s", out.String(), errOut.String())
	require.NoError(t, err)
	rows := markdownRows(t, out.String())
	servlet := rows["servlet, 8 threads x 5: kept / expected"]
	require.Len(t, servlet, 3)
	assert.Equal(t, "40/40", servlet[1], "safefs keeps every update")
	views := rows["cgi-views: 5 posts, then 32 views of 100 ms, 16 at a time"]
	require.Len(t, views, 3)
	assert.Regexp(t, `^[0-9.]+ views/s \([0-9.]+x, \?, safefs-rmw-off [0-9.]+x\)$`, views[1])
	posts := rows["cgi-bbs: posts kept / posts"]
	require.Len(t, posts, 3)
	assert.Equal(t, "5/5", posts[1], "safefs keeps every post")
	assert.Empty(t, apacheProcesses(t, dir), "Apache processes left behind")
}
