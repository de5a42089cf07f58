package testfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// RunUnlockPatterns runs every pattern, 16 processes at a time as www,
// each in its own directory below the data directory, and requires every
// increment kept and no empty, torn or stale read. dirs are that data
// directory as one or more mounts show it (one per host of a cluster):
// the processes take them in turn, so each host reads and writes through
// its own mount; the first makes the directories.
func RunUnlockPatterns(t *testing.T, www Cred, dirs ...string) {
	for _, p := range unlockPatterns {
		t.Run(p.name(), func(t *testing.T) {
			requireInterpreter(t, p.lang)
			wwwDir(t, &www, filepath.Join(dirs[0], p.name()))
			RunPerl(t, &www, "write.pl", filepath.Join(dirs[0], p.name(), "count.txt"), ">", "0\n")
			ps := make([]Perl, unlockProcs)
			for i := range ps {
				d := filepath.Join(dirs[i%len(dirs)], p.name())
				ps[i] = Perl{Lang: p.lang, Script: p.script, As: &www,
					Args: []string{p.method, filepath.Join(d, "count.txt"), strconv.Itoa(unlockRuns), filepath.Join(d, "count.lock")}}
			}
			outs := runAll(t, ps)
			assertNoAnomalies(t, outs)
			data, err := os.ReadFile(filepath.Join(dirs[0], p.name(), "count.txt"))
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
