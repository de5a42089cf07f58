package testfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hanwen/go-fuse/v2/posixtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	safefs "github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/scriptlock"
)

func daemonLocks(o *safefs.Options) { o.ScriptLocks = scriptlock.NewMemory() }

// locks=daemon: go-fuse's lock tests, and the scripts' locked counters
// (flock, fcntl, and flock on a lock file rewritten under the lock) exact.
func TestDaemonLocksCounters(t *testing.T) {
	m, www, _ := setup(t, daemonLocks)
	posixtest.FcntlFlockSetLk(t, m.Dir)
	for _, method := range []string{"flock", "fcntl", "flockfile"} {
		t.Run(method, func(t *testing.T) {
			dir := m.Path("data/" + method)
			wwwDir(t, &www, dir)
			file := filepath.Join(dir, "count.txt")
			RunPerl(t, &www, "write.pl", file, ">", "0\n")
			ps := make([]Perl, lockProcs)
			for i := range ps {
				ps[i] = Perl{Script: "lock_counter.pl", As: &www,
					Args: []string{method, file, strconv.Itoa(lockRuns), filepath.Join(dir, "count.lock")}}
			}
			assertNoAnomalies(t, runAll(t, ps))
			assert.Equal(t, lockProcs*lockRuns, counter(t, readBoth(t, m, "data/"+method+"/count.txt")), "increments kept")
		})
	}
}

// A lock is the daemon's (the kernel's table does not list it), on the
// logical file: it excludes through another hard link of the file and
// across a commit of the file by another process, and ends at unlock.
func TestDaemonLocksPerFile(t *testing.T) {
	m := New(t, daemonLocks)
	require.NoError(t, os.WriteFile(m.Path("a"), []byte("1\n"), 0o644))
	require.NoError(t, os.Link(m.Path("a"), m.Path("b")))
	f, err := os.OpenFile(m.Path("b"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_EX))
	var st unix.Stat_t
	require.NoError(t, unix.Fstat(int(f.Fd()), &st))
	locks, err := os.ReadFile("/proc/locks")
	require.NoError(t, err)
	assert.NotContains(t, string(locks), ":"+strconv.FormatUint(st.Ino, 10)+" ", "the kernel holds the lock")

	tryLock := func() string {
		out, err := exec.Command("perl", "-e", `use Fcntl ":flock"; open(F, "<", $ARGV[0]) or die "open: $!";
			print flock(F, LOCK_EX|LOCK_NB) ? "got" : "busy: $!"`, m.Path("a")).CombinedOutput()
		require.NoError(t, err, "%s", out)
		return strings.TrimSpace(string(out))
	}
	assert.Contains(t, tryLock(), "busy", "through the other name")
	out, err := exec.Command("perl", "-e", `open(F, ">", $ARGV[0]) or die "$!"; print F "2\n"; close(F) or die "$!"`, m.Path("a")).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, tryLock(), "busy", "after a commit of the file")
	require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_UN))
	assert.Equal(t, "got", tryLock(), "after the unlock")
}
