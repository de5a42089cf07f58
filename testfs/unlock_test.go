package testfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	safefs "github.com/safefs/safefs/fs"
)

// unlockProcs x unlockRuns increments per pattern: each pattern lost a
// third or more of them before unlocks published (and the PHP manual's
// example 87 %), so the sizes find a regression every time.
const unlockProcs, unlockRuns = 16, 8

// unlockPattern is a counter script that releases its lock before it
// closes the data file, in one language's way (or, "close", releases it
// by closing: the control; "reader" reads through a descriptor opened
// before its lock was granted).
type unlockPattern struct{ lang, script, method string }

var unlockPatterns = []unlockPattern{
	{"", "unlock_counter.pl", "flock"},
	{"", "unlock_counter.pl", "flock8"},
	{"", "unlock_counter.pl", "fcntl"},
	{"", "unlock_counter.pl", "range"},
	{"", "unlock_counter.pl", "lockfile"},
	{"", "unlock_counter.pl", "close"},
	{"", "unlock_counter.pl", "reader"},
	{"php", "unlock_counter.php", "manual"},
	{"php", "unlock_counter.php", "lockfile"},
	{"python", "unlock_counter.py", "lockf"},
	{"python", "unlock_counter.py", "flock"},
	{"python", "unlock_counter.py", "ofd"},
}

func (p unlockPattern) name() string {
	lang := p.lang
	if lang == "" {
		lang = "perl"
	}
	return lang + "-" + p.method
}

// runUnlockPatterns runs every pattern, 16 processes at a time as www-data,
// in its own directory under dir, and requires every increment kept and
// no empty, torn or stale read.
func runUnlockPatterns(t *testing.T, www Cred, dir string) {
	for _, p := range unlockPatterns {
		t.Run(p.name(), func(t *testing.T) {
			requireInterpreter(t, p.lang)
			d := filepath.Join(dir, p.name())
			wwwDir(t, &www, d)
			file := filepath.Join(d, "count.txt")
			RunPerl(t, &www, "write.pl", file, ">", "0\n")
			ps := make([]Perl, unlockProcs)
			for i := range ps {
				ps[i] = Perl{Lang: p.lang, Script: p.script, As: &www,
					Args: []string{p.method, file, strconv.Itoa(unlockRuns), filepath.Join(d, "count.lock")}}
			}
			outs := runAll(t, ps)
			assertNoAnomalies(t, outs)
			data, err := os.ReadFile(file)
			require.NoError(t, err)
			assert.Equal(t, unlockProcs*unlockRuns, counter(t, data), "increments kept")
		})
	}
}

// requireInterpreter skips (fails under CI) when lang's interpreter is
// missing: .ci/run installs php-cli and python3.
func requireInterpreter(t *testing.T, lang string) {
	t.Helper()
	interp, _ := Perl{Lang: lang}.interpreter()
	if _, err := exec.LookPath(interp); err == nil {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is missing, and CI is set", interp)
	}
	t.Skipf("%s is missing", interp)
}

// TestUnlockPatternsPlainDir proves the scripts: on a plain directory
// every pattern keeps every increment.
func TestUnlockPatternsPlainDir(t *testing.T) {
	www := LookupUser(t, "www-data")
	runUnlockPatterns(t, www, PlainDir(t))
}

// TestContractUnlockBeforeClose: a script that releases its lock before
// it closes what it wrote (the PHP manual's flock example, flock(F, 8)
// in old Perl, fcntl F_UNLCK of the whole file or of a range, lockf,
// flock and OFD locks in Python, a separate lock file released before
// the data file is closed) finds its writes published when the lock is
// released, as on a local file system (contract 10); and a reader that
// locks a descriptor it opened before reads what the last holder wrote.
// Every increment is kept, with the default durability (full) and none.
func TestContractUnlockBeforeClose(t *testing.T) {
	t.Parallel() // heavy: see the package doc
	for _, durable := range []bool{true, false} {
		t.Run(map[bool]string{true: "durability=full", false: "durability=none"}[durable], func(t *testing.T) {
			m, www, dir := setup(t, func(o *safefs.Options) { o.Durable = durable })
			runUnlockPatterns(t, www, dir)
			assert.Positive(t, m.Stats().UnlockCommits, "commits made at unlocks")
			NoPendingStaging(t, m)
		})
	}
}

// TestContractKilledLockHolder: a script killed by a signal while it
// holds a lock (flock or fcntl) and has rewritten the data file without
// closing it leaves the previous version (contract 7): the release of
// its lock, which its death makes, publishes nothing.
func TestContractKilledLockHolder(t *testing.T) {
	m, www, dir := setup(t)
	for _, method := range []string{"flock", "fcntl"} {
		t.Run(method, func(t *testing.T) {
			file, lock := filepath.Join(dir, method+".txt"), filepath.Join(dir, method+".lock")
			RunPerl(t, &www, "write.pl", file, ">", "0\n")
			RunPerl(t, &www, "write.pl", lock, ">", "")
			killed := m.Stats().Killed
			for range 5 {
				out, err := Perl{Script: "killed_locker.pl", As: &www, Args: []string{method, file, lock}}.Run()
				var exit *exec.ExitError
				require.ErrorAs(t, err, &exit, "the script kills itself: %s", out)
				require.Equal(t, syscall.SIGKILL, exit.Sys().(syscall.WaitStatus).Signal(), "killed by SIGKILL, not an error: %s", out)
			}
			data, err := os.ReadFile(file)
			require.NoError(t, err)
			assert.Equal(t, "0\n", string(data), "the killed writers' rewrites")
			assert.Equal(t, killed+5, m.Stats().Killed, "killed writers counted")
		})
	}
}
