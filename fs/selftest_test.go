package fs

import (
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// While the self-test runs, its probe's name at the top of the mount
// leads into the internal directory, for the daemon's uid only:
// www-data, who owns BACKING here, can neither make a file, directory,
// FIFO or symlink of that name through the mount, nor remove, write or
// rename the probe; its failed lookups leave the daemon's name usable.
func TestSelfTestProbeOnlyTheDaemons(t *testing.T) {
	srv, backing, mnt := mountForTest(t, func(o *Options) { o.AllowOther = true })
	www, err := user.Lookup("www-data")
	if err != nil {
		t.Skipf("no www-data: %v", err)
	}
	uid, _ := strconv.Atoi(www.Uid)
	gid, _ := strconv.Atoi(www.Gid)
	for _, d := range []string{filepath.Dir(backing), filepath.Dir(filepath.Dir(backing))} {
		require.NoError(t, os.Chmod(d, 0o755))
	}
	require.NoError(t, os.Chown(backing, uid, gid))
	nm := selfTestPrefix + "test"
	srv.r.probe.Store(&nm)
	t.Cleanup(func() { srv.r.probe.Store(nil) })
	probe, inside := filepath.Join(mnt, nm), filepath.Join(backing, InternalDir, nm)
	asWWW := func(script string) string {
		t.Helper()
		out, err := exec.Command("setpriv", "--reuid=www-data", "--regid=www-data", "--clear-groups", "--",
			"/bin/sh", "-c", script+"; true", "sh", probe).CombinedOutput()
		require.NoError(t, err, "%s", out)
		return string(out)
	}

	assert.Empty(t, asWWW(`(true >"$1") 2>/dev/null && echo made; mkdir "$1" 2>/dev/null && echo mkdir;
		mkfifo "$1" 2>/dev/null && echo mkfifo; ln -s /etc "$1" 2>/dev/null && echo symlink`))
	assert.NoFileExists(t, inside)
	assert.NoFileExists(t, filepath.Join(backing, nm))

	f, err := os.OpenFile(probe, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	assert.FileExists(t, inside)
	assert.NoFileExists(t, filepath.Join(backing, nm))

	assert.Empty(t, asWWW(`(printf y >>"$1") 2>/dev/null && echo wrote; rm "$1" 2>/dev/null && echo removed;
		mv "$1" "$1.x" 2>/dev/null && echo renamed`))
	st, err := os.Stat(inside)
	require.NoError(t, err, "the probe")
	assert.Equal(t, int64(0), st.Size())

	require.NoError(t, os.Remove(probe))
	assert.NoFileExists(t, inside)
}
