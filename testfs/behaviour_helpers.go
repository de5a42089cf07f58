package testfs

// Helpers of the behaviour suite (bh*): file operations that fail the
// test on an error, and the guard that aborts a hung FUSE connection.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/mountinfo"
)

func bhWrite(t *testing.T, path, data string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(data), 0o644))
}

func bhRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// bhOpen opens path; the test's cleanup closes it if the case did not.
func bhOpen(t *testing.T, path string, flag int, perm os.FileMode) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, flag, perm)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

func bhClose(t *testing.T, f *os.File) {
	t.Helper()
	require.NoError(t, f.Close())
}

// bhReadAll reads f from offset 0 to EOF without moving its offset.
func bhReadAll(t *testing.T, f *os.File) string {
	t.Helper()
	b, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<40))
	require.NoError(t, err)
	return string(b)
}

func bhLstat(t *testing.T, path string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Lstat(path, &st))
	return st
}

func bhStat(t *testing.T, path string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Stat(path, &st))
	return st
}

func bhFstat(t *testing.T, f *os.File) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Fstat(int(f.Fd()), &st))
	return st
}

func bhNoEntry(t *testing.T, path string) {
	t.Helper()
	var st unix.Stat_t
	require.ErrorIs(t, unix.Lstat(path, &st), unix.ENOENT, "%s should not exist", path)
}

// bhNames lists dir (without . and ..), sorted.
func bhNames(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open(dir)
	require.NoError(t, err)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	require.NoError(t, err)
	sort.Strings(names)
	return names
}

// bhDirInos maps the names of dir to the inode numbers readdir gives.
func bhDirInos(t *testing.T, dir string) map[string]uint64 {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	out := map[string]uint64{}
	buf := make([]byte, 8192)
	for {
		n, err := unix.ReadDirent(fd, buf)
		require.NoError(t, err)
		if n == 0 {
			return out
		}
		for b := buf[:n]; len(b) > 0; {
			// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
			reclen := int(b[16]) | int(b[17])<<8
			ino := uint64(0)
			for i := 7; i >= 0; i-- {
				ino = ino<<8 | uint64(b[i])
			}
			nm := b[19:reclen]
			nm = nm[:bytes.IndexByte(nm, 0)]
			if s := string(nm); s != "." && s != ".." {
				out[s] = ino
			}
			b = b[reclen:]
		}
	}
}

// bhPerlAs runs a Perl one-liner as c and returns its exit status.
func bhPerlAs(t *testing.T, c Cred, prog string, args ...string) int {
	t.Helper()
	cmd := AsUser(exec.Command("perl", append([]string{"-e", prog}, args...)...), c)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	require.NoError(t, err, "perl: %s", out)
	return 0
}

func bhNano(ts unix.Timespec) int64 { return ts.Nano() }

func bhMode(st unix.Stat_t) uint32 { return st.Mode & 07777 }

func bhType(st unix.Stat_t) uint32 { return st.Mode & unix.S_IFMT }

// bhRunOrAbort runs a command. If it is still running after limit, the
// test fails, and when dir is on a FUSE mount its connection is aborted,
// so that processes stuck in a request of a hung file system can end.
func bhRunOrAbort(t *testing.T, dir string, limit time.Duration, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-ctx.Done():
	}
	t.Errorf("%s still running after %v: hung", name, limit)
	bhLogFsGoroutines(t)
	bhAbortFuse(t, dir)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	t.FailNow()
	return "", nil
}

// bhLogFsGoroutines logs the goroutines of an in-process safefs that are
// inside package fs: where a hung request is stuck.
func bhLogFsGoroutines(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "github.com/safefs/safefs/fs.") {
			t.Logf("daemon goroutine:\n%s", g)
		}
	}
}

// bhAbortFuse aborts the FUSE connection of the mount that holds dir
// (through fusectl, mounted if needed). It does nothing off FUSE.
func bhAbortFuse(t *testing.T, dir string) {
	t.Helper()
	mounts, err := mountinfo.Read(mountinfo.Self)
	if err != nil {
		t.Logf("cannot abort: %v", err)
		return
	}
	conn, best := "", ""
	for _, m := range mounts {
		if !strings.HasPrefix(m.Type, "fuse") {
			continue
		}
		mp := m.Point
		if (dir == mp || strings.HasPrefix(dir, mp+"/")) && len(mp) > len(best) {
			best, conn = mp, m.Dev[strings.IndexByte(m.Dev, ':')+1:]
		}
	}
	if conn == "" {
		return
	}
	const ctl = "/sys/fs/fuse/connections"
	abort := filepath.Join(ctl, conn, "abort")
	if _, err := os.Stat(abort); err != nil {
		_ = unix.Mount("fusectl", ctl, "fusectl", 0, "")
	}
	if err := os.WriteFile(abort, []byte("1"), 0o200); err != nil {
		t.Logf("cannot abort FUSE connection %s of %s: %v", conn, best, err)
		return
	}
	t.Logf("aborted FUSE connection %s of %s", conn, best)
}
