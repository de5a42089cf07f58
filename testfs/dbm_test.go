package testfs

// DBM databases through the mount: every module Perl offers on
// Debian, including those backed by gdbm, which maps its file shared.

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/safefs/safefs/fs"
)

// dbmModules are the ways an old script opens a DBM file: dbmopen
// (AnyDBM_File, NDBM_File on Debian) and the modules by name.
var dbmModules = []string{"dbmopen", "NDBM_File", "GDBM_File", "DB_File", "SDBM_File"}

// dbmKeysLeft is what dbm_single.pl leaves: 500 keys, every third deleted.
const dbmKeysLeft = 333

// TestDBMSingle: one process creates, updates and reads back a database
// (dbm_single.pl checks every value); then another process dumps it
// through the mount, and the dump equals one read directly in BACKING.
func TestDBMSingle(t *testing.T) {
	m, www, dir := setup(t)
	for _, module := range dbmModules {
		t.Run(module, func(t *testing.T) {
			file := filepath.Join(dir, "single_"+module)
			out := RunPerl(t, &www, "dbm_single.pl", module, file)
			assertNoAnomalies(t, []string{out})
			assert.Contains(t, out, "DONE keys="+strconv.Itoa(dbmKeysLeft))
			viaMount := RunPerl(t, &www, "dbm_dump.pl", module, file)
			inBacking := RunPerl(t, nil, "dbm_dump.pl", module, m.BackingPath("data", "single_"+module))
			assert.Equal(t, dbmKeysLeft, strings.Count(viaMount, "\n"), "keys dumped through the mount")
			assert.Equal(t, inBacking, viaMount, "dump through the mount vs in BACKING")
			NoPendingStaging(t, m)
		})
	}
}

// TestDBMConcurrent: hit counters updated by 8 processes x 200 under
// flock, on a lock file and on the database file itself (gdbm then told
// not to lock, as it would conflict with the script's flock): the count
// is exact, every process's own key holds its count, and no process read
// a count below one it had written.
func TestDBMConcurrent(t *testing.T) {
	t.Parallel() // heavy: see the package doc
	// durability=none: 16000 commits; the fsyncs double their cost and are
	// not what this test is about (the other DBM tests run the default).
	m, www, dir := setup(t, func(o *fs.Options) { o.Durable = false })
	// A group, so that its parallel subtests end before staging/ is checked.
	t.Run("all", func(t *testing.T) {
		for _, module := range dbmModules {
			for _, lock := range []string{"lockfile", "db"} {
				t.Run(module+"/"+lock, func(t *testing.T) {
					t.Parallel() // each waits on its own flock, mostly
					dbmCounter(t, &www, module, filepath.Join(dir, "hits_"+module+"_"+lock), lock)
				})
			}
		}
	})
	NoPendingStaging(t, m)
}

// dbmCounter runs 8 x 200 increments of dbm_counter.pl on file and
// checks the counts.
func dbmCounter(t *testing.T, www *Cred, module, file, lock string) {
	const procs, runs = 8, 200
	ps := make([]Perl, procs)
	for i := range ps {
		ps[i] = Perl{Script: "dbm_counter.pl", As: www, Args: []string{module, file, strconv.Itoa(runs), lock}}
	}
	assertNoAnomalies(t, runAll(t, ps))
	hits, own := dbmCounts(t, www, module, file, runs)
	assert.Equal(t, strconv.Itoa(procs*runs), hits, "the counter lost or doubled increments")
	assert.Equal(t, procs, own, "processes whose own key holds their count")
}

// dbmCounts dumps a counter database: the value of "hits" and how many
// "p<pid>" keys hold runs.
func dbmCounts(t *testing.T, c *Cred, module, file string, runs int) (string, int) {
	t.Helper()
	hits, own := "", 0
	for line := range strings.Lines(RunPerl(t, c, "dbm_dump.pl", module, file)) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		switch {
		case k == "hits":
			hits = v
		case strings.HasPrefix(k, "p") && v == strconv.Itoa(runs):
			own++
		}
	}
	return hits, own
}

// TestDBMGdbmWriterLock: gdbm's own lock (GDBM_File opened as writer
// while another process holds it as writer) behaves through the mount as
// on a plain directory: the same script on both gives the same lines.
func TestDBMGdbmWriterLock(t *testing.T) {
	_, www, dir := setup(t)
	plain := t.TempDir()
	require.NoError(t, os.Chmod(plain, 0o777)) // www-data creates the database
	onPlain := gdbmLockRun(t, &www, filepath.Join(plain, "locked"))
	onMount := gdbmLockRun(t, &www, filepath.Join(dir, "locked"))
	t.Logf("plain directory:\n%s", onPlain)
	assert.Contains(t, onPlain, "HELD\n", "the holder did not get the database on the plain directory")
	assert.Equal(t, onPlain, onMount, "gdbm's lock through the mount vs on a plain directory")
}

// gdbmLockRun holds file as gdbm writer in one process while another
// tries to open it as writer and as reader, then tries again once the
// holder has let go. It returns every line both printed, in order.
func gdbmLockRun(t *testing.T, c *Cred, file string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	hold := Perl{Script: "dbm_gdbm_lock.pl", As: c, Args: []string{"hold", file}}.Command(ctx)
	stdin, err := hold.StdinPipe()
	require.NoError(t, err)
	stdout, err := hold.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	hold.Stderr = &stderr
	require.NoError(t, hold.Start())
	waited := false
	defer func() {
		stdin.Close()
		if !waited {
			_ = hold.Wait()
		}
	}()
	lines := bufio.NewReader(stdout)
	var log strings.Builder
	held, _ := lines.ReadString('\n')
	log.WriteString(held)
	if held != "HELD\n" {
		rest, _ := io.ReadAll(lines)
		log.Write(rest)
		stdin.Close()
		waited = true
		_ = hold.Wait() // its stderr is complete only then
		return log.String() + stderr.String()
	}
	tryLock := Perl{Script: "dbm_gdbm_lock.pl", As: c, Args: []string{"try", file}}
	out, err := tryLock.Run()
	require.NoError(t, err)
	log.WriteString(out)
	require.NoError(t, stdin.Close())
	rest, _ := io.ReadAll(lines)
	log.Write(rest)
	waited = true
	require.NoError(t, hold.Wait(), "holder: %s", stderr.String())
	out, err = tryLock.Run()
	require.NoError(t, err)
	log.WriteString(out)
	return log.String()
}
