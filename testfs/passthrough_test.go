package testfs

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/safefs/safefs/fs"
)

// TestPassthroughDBMReadersAndWriters: with passthrough=read, hit
// counters that 4 processes x 100 update under flock while 4 others
// read them (shared flock, tie read-only) x 100: the count is exact, no
// reader sees it go down, and every writer's own key holds its count.
// Readers alone on the database are passed through, and a writer that
// opens right after one gets the reader's backing file for its maps.
func TestPassthroughDBMReadersAndWriters(t *testing.T) {
	www := LookupUser(t, "www-data")
	m := New(t, func(o *fs.Options) { o.Durable, o.Passthrough = false, true })
	dir := m.Path("data")
	require.NoError(t, os.Mkdir(dir, 0o755))
	require.NoError(t, os.Chown(dir, int(www.Uid), int(www.Gid)))
	t.Run("all", func(t *testing.T) {
		for _, module := range dbmModules {
			t.Run(module, func(t *testing.T) {
				t.Parallel()
				ptDBM(t, &www, module, filepath.Join(dir, "hits_"+module))
			})
		}
	})
	t.Logf("stats: %+v", m.Stats())
	NoPendingStaging(t, m)
}

func ptDBM(t *testing.T, www *Cred, module, file string) {
	const procs, runs = 4, 100
	RunPerl(t, www, "dbm_counter.pl", module, file, "1") // the database exists for the readers
	var ps []Perl
	for range procs {
		ps = append(ps, Perl{Script: "dbm_counter.pl", As: www, Args: []string{module, file, strconv.Itoa(runs)}},
			Perl{Script: "dbm_reader.pl", As: www, Args: []string{module, file, strconv.Itoa(runs)}})
	}
	assertNoAnomalies(t, runAll(t, ps))
	hits, own := dbmCounts(t, www, module, file, runs)
	assert.Equal(t, strconv.Itoa(procs*runs+1), hits, "the counter lost or doubled increments")
	assert.Equal(t, procs, own, "processes whose own key holds their count")
}
