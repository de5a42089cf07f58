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
	t.Parallel() // heavy: see the package doc
	m, www, dir := setup(t, func(o *fs.Options) { o.Durable, o.Passthrough, o.VersionCache = false, true, false })
	for _, module := range dbmModules { // the databases exist for the readers
		RunPerl(t, &www, "dbm_counter.pl", module, filepath.Join(dir, "hits_"+module), "1")
	}
	// A new daemon has not seen the databases mapped: the first opens
	// after it are readers, which are passed through.
	m.Remount(t)
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

// TestPassthroughNotForGdbm: a gdbm database is never passed through,
// even by a new daemon that has not seen it mapped: a writer opening
// while a reader is passed through would map the reader's version.
// A plain file read the same way is.
func TestPassthroughNotForGdbm(t *testing.T) {
	m, www, dir := setup(t, func(o *fs.Options) { o.Passthrough, o.VersionCache = true, false })
	for _, module := range []string{"GDBM_File", "dbmopen"} {
		RunPerl(t, &www, "dbm_counter.pl", module, filepath.Join(dir, "db_"+module), "1")
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "plain"), []byte("x"), 0o644))
	m.Remount(t)
	for _, module := range []string{"GDBM_File", "dbmopen"} {
		hits, _ := dbmCounts(t, &www, module, filepath.Join(dir, "db_"+module), 1)
		require.Equal(t, "1", hits, module)
	}
	require.Zero(t, m.Stats().Passthrough, "a gdbm database was passed through")
	_, err := os.ReadFile(filepath.Join(dir, "plain"))
	require.NoError(t, err)
	if os.Geteuid() == 0 {
		require.Equal(t, int64(1), m.Stats().Passthrough, "a plain file was not passed through")
	}
}
