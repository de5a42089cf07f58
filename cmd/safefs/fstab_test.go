package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/mountinfo"
)

// nsMount runs mount(8) with args in a private mount namespace where
// /usr/local/sbin is the directory of the binary under test: libmount
// clears PATH for mount.fuse3, whose /bin/sh then finds safefs only in
// the shell's default PATH. /run/mount gets a tmpfs of its own, so that
// libmount's utab entries (x-* options) stay in the namespace too. pre,
// if not empty, runs first in that namespace. A daemon it leaves keeps the
// namespace, and its mount, alive.
func nsMount(t *testing.T, pre string, args ...string) result {
	t.Helper()
	requireTool(t, "unshare")
	requireTool(t, "mount.fuse3")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	script := `mount --bind "$0" /usr/local/sbin && mkdir -p /run/mount && mount -t tmpfs utab /run/mount && ` +
		pre + ` exec mount "$@"`
	cmd := exec.CommandContext(ctx, "unshare", append([]string{"-m", "--propagation", "private",
		"sh", "-c", script, filepath.Dir(safefsBin)}, args...)...)
	return runResult(t, cmd, "mount", args)
}

// becomeSubreaper makes the test adopt the daemons that the fstab form
// leaves behind, so that their exit status can be read (reapDaemon).
func becomeSubreaper(t *testing.T) {
	t.Helper()
	require.NoError(t, unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0))
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
}

// orphanDaemons lists the safefs processes adopted by the test (parent is
// the test, comm safefs), leaving out the pids in started.
func orphanDaemons(t *testing.T, started ...int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || containsInt(started, pid) {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...
		s := string(stat)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		f := strings.Fields(s[end+1:])
		if open < 0 || end < 0 || len(f) < 2 {
			continue
		}
		if s[open+1:end] == "safefs" && f[1] == strconv.Itoa(os.Getpid()) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func containsInt(list []int, n int) bool {
	for _, v := range list {
		if v == n {
			return true
		}
	}
	return false
}

// adoptDaemon returns the one daemon the fstab form left, and registers a
// cleanup that kills and reaps it should the test not have.
func adoptDaemon(t *testing.T) int {
	t.Helper()
	pids := orphanDaemons(t)
	require.Len(t, pids, 1, "daemons left by the fstab form")
	pid := pids[0]
	t.Cleanup(func() {
		if syscall.Kill(pid, 0) == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			reapDaemon(t, pid)
		}
	})
	return pid
}

// reapDaemon waits for an adopted daemon to exit and returns its status.
func reapDaemon(t *testing.T, pid int) syscall.WaitStatus {
	t.Helper()
	done := make(chan syscall.WaitStatus, 1)
	go func() {
		var ws syscall.WaitStatus
		for {
			_, err := syscall.Wait4(pid, &ws, 0, nil)
			if !errors.Is(err, syscall.EINTR) {
				break
			}
		}
		done <- ws
	}()
	select {
	case ws := <-done:
		return ws
	case <-time.After(waitLimit):
		t.Fatalf("daemon %d still running after %v", pid, waitLimit)
		return 0
	}
}

// nsMountType is mountType in the mount namespace of process pid.
func nsMountType(t *testing.T, pid int, path string) (string, bool) {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/mounts", pid))
	require.NoError(t, err)
	fstype, ok := "", false
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) >= 3 && mountinfo.Unescape(f[1]) == path {
			fstype, ok = f[2], true
		}
	}
	return fstype, ok
}

// TestFstabMount: `mount -t fuse.safefs` and an fstab line, through
// mount(8) and mount.fuse3, return 0 once the mount is there, leave one
// daemon serving it, and `umount` ends that daemon with exit 0.
func TestFstabMount(t *testing.T) {
	requireRoot(t)
	requireFuse(t)
	requireTool(t, "nsenter")
	// Options mount(8), fstab and mount.fuse3 add; safefs must accept them.
	const extra = "nofail,_netdev,x-systemd.requires=local-fs.target,noatime,defaults"
	tests := []struct {
		name  string
		mount func(t *testing.T, backing, mnt, opts string) result
	}{
		{"mount -t fuse.safefs", func(t *testing.T, backing, mnt, opts string) result {
			return nsMount(t, "", "-t", "fuse.safefs", "-o", opts, backing, mnt)
		}},
		{"fstab line", func(t *testing.T, backing, mnt, opts string) result {
			fstab := filepath.Join(t.TempDir(), "fstab")
			line := fmt.Sprintf("%s %s fuse.safefs %s 0 0\n", backing, mnt, opts)
			require.NoError(t, os.WriteFile(fstab, []byte(line), 0o644))
			return nsMount(t, "", "-T", fstab, mnt)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			becomeSubreaper(t)
			backing, mnt, logf := tempDir(t), tempDir(t), filepath.Join(t.TempDir(), "log")
			r := tt.mount(t, backing, mnt, extra+",log_file="+logf)
			require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
			assert.Empty(t, r.stderr)

			pid := adoptDaemon(t)
			fstype, ok := nsMountType(t, pid, mnt)
			require.True(t, ok, "mount exited 0 but %s is not mounted", mnt)
			assert.Equal(t, "fuse.safefs", fstype)
			inMount := fmt.Sprintf("/proc/%d/root%s/f", pid, mnt)
			require.NoError(t, os.WriteFile(inMount, []byte("through fstab\n"), 0o644))
			got, err := os.ReadFile(filepath.Join(backing, "f"))
			require.NoError(t, err)
			assert.Equal(t, "through fstab\n", string(got))

			out, err := exec.Command("nsenter", "-t", strconv.Itoa(pid), "-m", "umount", mnt).CombinedOutput()
			require.NoError(t, err, "umount: %s", out)
			ws := reapDaemon(t, pid)
			assert.True(t, ws.Exited() && ws.ExitStatus() == 0, "daemon ended with %v", ws)
			assert.Empty(t, orphanDaemons(t), "safefs processes left")
			log, err := os.ReadFile(logf)
			require.NoError(t, err)
			assert.Contains(t, string(log), "unmounted from outside")
		})
	}
}

// TestFstabMountFails: a mount that cannot be made fails the foreground
// `mount` command with safefs's exit code and one line, and leaves no
// daemon behind.
func TestFstabMountFails(t *testing.T) {
	requireRoot(t)
	requireFuse(t)
	tests := []struct {
		name string
		pre  string // shell run in the namespace first; $MNT is the mountpoint
		args func(backing, mnt string) []string
		code int
		want string
	}{
		{name: "backing missing", args: func(backing, mnt string) []string {
			return []string{"-t", "fuse.safefs", backing + "/missing", mnt}
		}, code: exitBadDirs, want: "does not exist"},
		{name: "mountpoint busy", pre: `mount -t tmpfs none "$MNT" &&`, args: func(backing, mnt string) []string {
			return []string{"-t", "fuse.safefs", backing, mnt}
		}, code: exitMounted, want: "already a mount point"},
		{name: "unknown option", args: func(backing, mnt string) []string {
			return []string{"-t", "fuse.safefs", "-o", "frob=1", backing, mnt}
		}, code: exitUsage, want: `unknown option "frob"`},
		{name: "noexec refused", args: func(backing, mnt string) []string {
			return []string{"-t", "fuse.safefs", "-o", "noexec", backing, mnt}
		}, code: exitUsage, want: "noexec is not supported"},
		{name: "relative log_file", args: func(backing, mnt string) []string {
			return []string{"-t", "fuse.safefs", "-o", "log_file=x.log", backing, mnt}
		}, code: exitUsage, want: "absolute path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			becomeSubreaper(t)
			backing, mnt := tempDir(t), tempDir(t)
			t.Setenv("MNT", mnt)
			r := nsMount(t, tt.pre, tt.args(backing, mnt)...)
			assert.Equal(t, tt.code, r.code, r.stderr)
			assertOneLine(t, r.stderr, tt.want)
			assert.Empty(t, orphanDaemons(t), "safefs processes left")
		})
	}

	// Found only by the daemon (BACKING's lock), so reported through the
	// pipe to the foreground process.
	t.Run("backing busy", func(t *testing.T) {
		becomeSubreaper(t)
		backing, mnt, mnt2 := tempDir(t), tempDir(t), tempDir(t)
		p := startMount(t, backing, mnt)
		r := nsMount(t, "", "-t", "fuse.safefs", backing, mnt2)
		assert.Equal(t, exitBusy, r.code, r.stderr)
		assertOneLine(t, r.stderr, "already served")
		assert.Empty(t, orphanDaemons(t, p.cmd.Process.Pid), "safefs processes left")
		stopMount(t, p)
	})
}

// TestFstabFormDirect: `safefs BACKING MOUNTPOINT` run by hand goes to the
// background once mounted; with -f it stays in the foreground.
func TestFstabFormDirect(t *testing.T) {
	requireRoot(t)
	requireFuse(t)
	t.Run("background", func(t *testing.T) {
		becomeSubreaper(t)
		backing, mnt, logf := tempDir(t), tempDir(t), filepath.Join(t.TempDir(), "log")
		t.Cleanup(func() { unmountIfMounted(t, mnt) })
		r := runSafefs(t, nil, backing, mnt, "-o", "rw,dev,suid,log_file="+logf)
		require.Equal(t, exitOK, r.code, r.stderr)
		pid := adoptDaemon(t)
		fstype, ok := mountType(t, mnt)
		require.True(t, ok, "safefs exited 0 but %s is not mounted", mnt)
		assert.Equal(t, "fuse.safefs", fstype)
		require.NoError(t, syscall.Unmount(mnt, 0))
		ws := reapDaemon(t, pid)
		assert.True(t, ws.Exited() && ws.ExitStatus() == 0, "daemon ended with %v", ws)
	})
	t.Run("foreground", func(t *testing.T) {
		backing, mnt := tempDir(t), tempDir(t)
		p := launchMount(t, exec.Command(safefsBin, backing, mnt, "-f"), mnt)
		p.waitMounted(t) // the log on stderr: still our child, in the foreground
		stopMount(t, p)
	})
}

func TestFstabRefusals(t *testing.T) {
	d := newRefusalDirs(t)
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"one path", []string{d.backing}, exitUsage, "BACKING and MOUNTPOINT"},
		{"three paths", []string{d.backing, d.mnt, d.mnt}, exitUsage, "BACKING and MOUNTPOINT"},
		{"drop_privileges fd", []string{d.backing, "/dev/fd/3"}, exitUsage, "drop_privileges"},
		{"forged daemon marker", []string{d.backing, d.mnt}, exitUsage, "is not a pipe"},
		{"missing mountpoint", []string{d.backing, d.missing}, exitBadDirs, "does not exist"},
		{"unwritable log_file", []string{d.backing, d.mnt, "-o", "log_file=" + d.file + "/x"}, exitUsage, "log_file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var env []string
			if strings.Contains(tt.name, "marker") {
				env = []string{readyFdEnv + "=0"}
			}
			r := runSafefs(t, env, tt.args...)
			assert.Equal(t, tt.code, r.code, r.stderr)
			assertOneLine(t, r.stderr, tt.want)
		})
	}
}

func TestFstabOptions(t *testing.T) {
	a, err := parseMountArgs(strings.Fields("b m -o rw,dev,suid,nodev,nosuid,exec,nofail,_netdev,defaults,auto,noauto,users," +
		"noatime,relatime,x-systemd.automount,x-systemd.requires=a.mount,X-mount.mkdir,comment=web"))
	require.NoError(t, err)
	assert.Equal(t, defaultMountConfig(), a.cfg, "mount(8) options must be ignored")

	a, err = parseMountArgs(strings.Fields("b m -f -o log_file=/var/log/safefs.log"))
	require.NoError(t, err)
	assert.True(t, a.cfg.foreground)
	assert.Equal(t, "/var/log/safefs.log", a.cfg.logFile)

	for _, opt := range []string{"noexec", "sync", "dirsync", "mand", "foreground=1", "log_file"} {
		_, err := parseMountArgs([]string{"b", "m", "-o", opt})
		assert.Equal(t, exitUsage, exitCode(err), "option %s: %v", opt, err)
	}
}

func TestIsFstabForm(t *testing.T) {
	dir := tempDir(t)
	t.Chdir(dir)
	require.NoError(t, os.Mkdir("data", 0o755))
	for args, want := range map[string]bool{
		"/srv/data /mnt": true, "./data m": true, "data m": true,
		"frobnicate m": false, "-o x": false, "": false,
	} {
		assert.Equal(t, want, isFstabForm(strings.Fields(args)), "%q", args)
	}
}

func TestDaemonErrorLine(t *testing.T) {
	line := formatErrorLine(failf(exitBusy, "backing is busy\nsecond line"))
	code, msg, ok := parseErrorLine(line)
	require.True(t, ok, line)
	assert.Equal(t, exitBusy, code)
	assert.Equal(t, "backing is busy; second line", msg)
	for _, bad := range []string{"", "ready\n", "error x y\n", "error 0 y\n", "error 300 y\n", "error 6\n"} {
		_, _, ok := parseErrorLine(bad)
		assert.False(t, ok, "%q", bad)
	}
}
