package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/safefs/safefs/scriptlock/etcdtest"
	"github.com/safefs/safefs/testfs"
)

// TestClusterTable runs the cluster table briefly on a real etcd, real
// mounts and real Perl counters: every cell is a rate, the etcd rows
// with their ratio to the row above (a careful counter that lost an
// increment would be an error cell).
func TestClusterTable(t *testing.T) {
	testfs.Available(t)
	requirePerl(t)
	e := etcdtest.Start(t)
	var out bytes.Buffer
	clusterBench(&out, t.TempDir(), e.URL, 5, true)
	rows := map[string][]string{}
	for l := range strings.Lines(out.String()) {
		f := strings.Split(strings.Trim(strings.TrimSpace(l), "|"), "|")
		if len(f) == 1+len(clusterCols) {
			for i := range f {
				f[i] = strings.TrimSpace(f[i])
			}
			rows[f[0]] = f[1:]
		}
	}
	for i, r := range clusterRows {
		require.Contains(t, rows, r.name, "table:\n%s", out.String())
		for j, cell := range rows[r.name] {
			want := `^[0-9]+ \([0-9.]+x\)$`
			if i == 0 {
				want = `^[0-9]+$`
			}
			assert.Regexp(t, want, cell, "%s, %s", r.name, clusterCols[j].name)
		}
	}
}
