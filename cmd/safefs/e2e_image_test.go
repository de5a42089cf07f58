package main

// Image test: BACKING is a small ext4 file system on a loop device,
// mounted with noauto_da_alloc (so ext4 does not flush a file replaced by
// rename on its own: only safefs's fsyncs make its commits durable).
// While the crash-load workload commits through safefs, the image file is
// copied at a random instant, without any sync: the copy is what the disk
// would hold after a power cut at that instant. The copy is checked with
// e2fsck, written onto the original's loop device (the same device
// number, as after a reboot), mounted and recovered with `safefs
// recover`, and every file must be a whole version holding at least every
// commit acknowledged before the instant, with nothing left over.
//
// The instant: the daemon is stopped (SIGSTOP, waiting until every one of
// its threads is stopped, so the system calls it had made are complete)
// for the copy, then continued. A copy taken while the daemon runs would
// not be one instant: cp reads the image front to back while ext4 goes
// on writing, so a rename could be copied without the data it was fsynced
// after, a state no crash can produce.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// requireLoopExt4 skips unless loop devices and the ext4 tools are usable,
// except in CI, where the image tests must run: there a missing tool, a
// non-root runner or a container without loop devices fails the test.
func requireLoopExt4(t *testing.T) {
	t.Helper()
	ci := os.Getenv("CI") != ""
	if os.Geteuid() != 0 && ci {
		t.Fatal("the image tests need root (loop devices, mount) and CI is set: run them as root")
	}
	requireRoot(t)
	for _, tool := range []string{"losetup", "mkfs.ext4", "e2fsck"} {
		requireTool(t, tool) // .ci/run installs e2fsprogs and util-linux
	}
	if out, err := exec.Command("losetup", "-f").CombinedOutput(); err != nil {
		msg := fmt.Sprintf("no free loop device (losetup -f: %v: %s): this machine or container does not allow loop devices",
			err, strings.TrimSpace(string(out)))
		if ci {
			t.Fatal(msg + "; CI is set: give the runner loop devices (/dev/loop-control)")
		}
		t.Skip(msg)
	}
}

// loopFS is an ext4 image attached to a loop device and mounted.
type loopFS struct {
	dev, dir string
	mounted  bool
	attached bool
}

// attachLoop attaches img to a loop device: dev, or the first free one
// when dev is "". A cleanup unmounts and detaches what is still there.
func attachLoop(t *testing.T, img, dev string) (*loopFS, error) {
	t.Helper()
	args := []string{"-f", "--show", img}
	if dev != "" {
		args = []string{dev, img}
	}
	out, err := exec.Command("losetup", args...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("losetup %v: %w: %s", args, err, out)
	}
	if dev == "" {
		dev = strings.TrimSpace(string(out))
	}
	l := &loopFS{dev: dev, attached: true}
	t.Cleanup(func() { l.close(t) })
	return l, nil
}

// mount mounts the device (ext4, with opts) on dir.
func (l *loopFS) mount(t *testing.T, dir, opts string) {
	t.Helper()
	require.NoError(t, syscall.Mount(l.dev, dir, "ext4", 0, opts), "mount %s on %s", l.dev, dir)
	l.dir, l.mounted = dir, true
}

// loopMount attaches img to the first free loop device and mounts it.
func loopMount(t *testing.T, img, dir, opts string) *loopFS {
	t.Helper()
	l, err := attachLoop(t, img, "")
	require.NoError(t, err)
	l.mount(t, dir, opts)
	return l
}

// close unmounts (lazily, if busy) and detaches the loop device.
func (l *loopFS) close(t *testing.T) {
	t.Helper()
	if l.mounted {
		l.mounted = false
		if err := syscall.Unmount(l.dir, 0); err != nil {
			t.Logf("unmount %s: %v; detaching it", l.dir, err)
			unmountIfMounted(t, l.dir)
		}
	}
	if l.attached {
		l.attached = false
		if out, err := exec.Command("losetup", "-d", l.dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", l.dev, err, out)
		}
	}
}

// makeImage creates a 64 MiB ext4 image.
func makeImage(t *testing.T, img string) {
	t.Helper()
	f, err := os.Create(img)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(64<<20))
	require.NoError(t, f.Close())
	out, err := exec.Command("mkfs.ext4", "-F", "-q", img).CombinedOutput()
	require.NoError(t, err, "mkfs.ext4: %s", out)
}

// stopAll sends SIGSTOP and waits until every thread of pid is stopped.
func stopAll(t *testing.T, pid int) {
	t.Helper()
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	deadline := time.Now().Add(waitLimit)
	for {
		running, err := runningThreads(pid)
		require.NoError(t, err)
		if running == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d threads of pid %d still not stopped after %v", running, pid, waitLimit)
		}
		time.Sleep(time.Millisecond)
	}
}

// runningThreads counts the threads of pid not in a stopped state.
func runningThreads(pid int) (int, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue // the thread ended
		}
		if err != nil {
			return 0, err
		}
		// The state follows the command name, which ends with the last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+2 >= len(s) {
			return 0, fmt.Errorf("bad stat line %q", s)
		}
		if st := s[i+2]; st != 'T' && st != 't' {
			n++
		}
	}
	return n, nil
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	require.NoError(t, err)
	defer in.Close()
	out, err := os.Create(dst)
	require.NoError(t, err)
	_, err = io.Copy(out, in)
	require.NoError(t, err)
	require.NoError(t, out.Close())
}

func TestImageSnapshot(t *testing.T) {
	requireFuse(t)
	requireTool(t, "perl")
	requireLoopExt4(t)
	seed := crashLoadSeed(t)
	t.Logf("seed %d (rerun with SAFEFS_CRASHLOAD_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x1a6e))

	dir := tempDir(t)
	img, snap := filepath.Join(dir, "ext4.img"), filepath.Join(dir, "snapshot.img")
	backing, mnt, snapMnt := filepath.Join(dir, "backing"), filepath.Join(dir, "mnt"), filepath.Join(dir, "snapmnt")
	for _, d := range []string{backing, mnt, snapMnt} {
		require.NoError(t, os.Mkdir(d, 0o755))
	}
	makeImage(t, img)
	orig := loopMount(t, img, backing, "noauto_da_alloc")

	setupLoad(t, backing, mnt)
	p := startMountWith(t, backing, mnt, "")
	const seconds = 3
	at := time.Duration(300+rng.IntN(2200)) * time.Millisecond
	t.Logf("snapshot after %v of a %ds workload", at, seconds)
	w, load := startLoad(t, mnt, "img", seconds)
	time.Sleep(at)

	// The instant: everything acknowledged so far must be in the copy.
	before := load.snapshot()
	stopAll(t, p.cmd.Process.Pid)
	copyFile(t, img, snap)
	require.NoError(t, syscall.Kill(p.cmd.Process.Pid, syscall.SIGCONT))

	w.wait(t)
	load.checkHealthy(t)
	require.True(t, strings.HasSuffix(load.String(), "DONE\n"), "workload output:\n%s", load)
	end := load.snapshot()
	stopMount(t, p)
	t.Logf("acked before the copy: %d counter, %d append, %d rewrite commits; in all: %d, %d, %d",
		countAll(before.Counter), sumAll(before.Append), sumRewrites(before.Rewrite),
		countAll(end.Counter), sumAll(end.Append), sumRewrites(end.Rewrite))

	// The live file system, cleanly unmounted, holds exactly the acked commits.
	live := readLoadState(t, backing)
	assertNoDebris(t, backing)
	checkCounterAcks(t, end, live)
	checkAckedRange(t, "live", live, end, end)
	// Unmounted, but the loop device stays attached: the copy goes onto
	// it below, so it is recovered on the same device number as the
	// original, as after a reboot (see TestImageRecoverOnOtherDevice).
	// (Detaching it and attaching the copy to that device again would
	// race with any other user of loop devices.)
	require.NoError(t, syscall.Unmount(backing, 0))
	orig.mounted = false

	// The copy, as after a power cut.
	fsck := exec.Command("e2fsck", "-f", "-y", snap)
	out, err := fsck.CombinedOutput()
	code := fsck.ProcessState.ExitCode()
	t.Logf("e2fsck exit %d:\n%s", code, out)
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("e2fsck: %v", err)
	}
	// 0: clean, 1 or 2: fixed (the journal replay counts); 4 and up: left errors.
	require.Less(t, code, 4, "e2fsck could not repair the copy: an ext4 problem, not safefs's")
	cptWriteDevice(t, snap, orig.dev)
	orig.mount(t, snapMnt, "noauto_da_alloc")
	s := recoverBacking(t, snapMnt)
	t.Logf("recover on the copy: %+v", s)
	// What recovery must guarantee is checked below: every file a whole
	// committed version holding every acknowledged commit, no staging or
	// undo file left, an empty journal, a second recovery a no-op. A
	// power cut may tear the journal's last line (a line no close() had
	// waited for yet): recovery skips it and counts it as torn, the one
	// thing it may find wrong; any refusal is a failure.
	assert.LessOrEqual(t, s.Torn, 1, "only the last journal line can be torn")
	assert.Zero(t, s.Refused, "recovery refused something (see its log above)")
	got := readLoadState(t, snapMnt)
	assertNoDebris(t, snapMnt)
	requireRecoverNoop(t, snapMnt)
	checkCounterAcks(t, before, got)
	checkAckedRange(t, "copy", got, before, end)
}

// cptWriteDevice writes the image src over the whole block device dev
// (through the device, so its cache holds the new content) and makes it
// durable. dev must not be mounted: it is opened O_EXCL.
func cptWriteDevice(t *testing.T, src, dev string) {
	t.Helper()
	in, err := os.Open(src)
	require.NoError(t, err)
	defer in.Close()
	out, err := os.OpenFile(dev, os.O_WRONLY|syscall.O_EXCL, 0)
	require.NoError(t, err, "open %s exclusively (it must not be in use)", dev)
	n, err := io.Copy(out, in)
	require.NoError(t, err, "write %s onto %s", src, dev)
	require.NoError(t, out.Sync())
	require.NoError(t, out.Close())
	st, err := in.Stat()
	require.NoError(t, err)
	require.Equal(t, st.Size(), n, "bytes of %s written onto %s", src, dev)
	// What a mount of dev will read is the copy, not a cached block of
	// the original.
	want, err := os.ReadFile(src)
	require.NoError(t, err)
	got, err := os.ReadFile(dev)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got[:min(len(got), len(want))]), "%s does not read back as %s", dev, src)
}

// checkAckedRange requires each file to hold at least the commits acked
// in lo and at most those acked in hi (the workload ran to its end).
func checkAckedRange(t *testing.T, what string, got loadState, lo, hi acks) {
	t.Helper()
	for name, v := range got.Counter {
		assert.GreaterOrEqual(t, v, maxOf(lo.Counter[name]), "%s %s lost acknowledged increments", what, name)
		assert.LessOrEqual(t, v, maxOf(hi.Counter[name]), "%s %s counts beyond every increment made", what, name)
	}
	for i := range loadAppenders {
		id := fmt.Sprintf("img-a%d", i)
		n := len(got.Append[id])
		assert.GreaterOrEqual(t, n, lo.Append[id], "%s: %s lost acknowledged entries", what, id)
		assert.LessOrEqual(t, n, hi.Append[id], "%s: %s has more entries than it wrote", what, id)
	}
	for name, v := range got.Rewrite {
		if v.Tag == "setup" {
			assert.Zero(t, lo.Rewrite[name].Ver, "%s %s lost acknowledged versions: still the setup version", what, name)
			continue
		}
		if assert.Equal(t, "img", v.Tag, "%s %s", what, name) {
			assert.GreaterOrEqual(t, v.Ver, lo.Rewrite[name].Ver, "%s %s lost acknowledged versions", what, name)
			assert.LessOrEqual(t, v.Ver, hi.Rewrite[name].Ver, "%s %s is a version never written", what, name)
		}
	}
}

func maxOf(vals []int) int {
	m := 0
	for _, v := range vals {
		m = max(m, v)
	}
	return m
}

// TestImageRecoverOnOtherDevice: a commit cut off by a crash must be
// settled also when the file system comes back on another device number
// (an image restored or attached elsewhere, a disk renumbered at boot):
// the same files, the same inode numbers, another st_dev.
func TestImageRecoverOnOtherDevice(t *testing.T) {
	requireFuse(t)
	requireTool(t, "perl")
	requireLoopExt4(t)
	for _, point := range []string{"append-half", "inplace-truncated"} {
		t.Run(point, func(t *testing.T) {
			kind, _, _ := strings.Cut(point, "-")
			c, ok := crashCaseFor(kind)
			require.True(t, ok)
			dir := tempDir(t)
			img := filepath.Join(dir, "ext4.img")
			backing, mnt, other := filepath.Join(dir, "backing"), filepath.Join(dir, "mnt"), filepath.Join(dir, "other")
			for _, d := range []string{backing, mnt, other} {
				require.NoError(t, os.Mkdir(d, 0o755))
			}
			makeImage(t, img)
			first := loopMount(t, img, backing, "noauto_da_alloc")

			p := startMountWith(t, backing, mnt, "")
			require.NoError(t, os.WriteFile(filepath.Join(mnt, c.name), c.old, 0o644))
			if c.alias != "" {
				require.NoError(t, os.Link(filepath.Join(mnt, c.name), filepath.Join(mnt, c.alias)))
			}
			stopMount(t, p)

			p = startMountWith(t, backing, mnt, point)
			w := commitPerl(t, c.mode, filepath.Join(mnt, c.name), c.new, "")
			waitKilled(t, p)
			unmountIfMounted(t, mnt)
			w.wait(t)
			ino := statID(t, filepath.Join(backing, c.name)).Ino

			// Unmount, and attach the image again while the first loop
			// device still holds it: the second one has another number.
			require.NoError(t, syscall.Unmount(backing, 0))
			first.mounted = false
			second := loopMount(t, img, other, "noauto_da_alloc")
			require.NotEqual(t, first.dev, second.dev)
			require.Equal(t, ino, statID(t, filepath.Join(other, c.name)).Ino, "the same file system")

			s := recoverBacking(t, other)
			t.Logf("recover on %s (written on %s): %+v", second.dev, first.dev, s)
			got, err := os.ReadFile(filepath.Join(other, c.name))
			require.NoError(t, err)
			assert.True(t, bytes.Equal(c.old, got), "%s after a crash at %s, recovered on another device: %s",
				c.name, point, describe(got, map[string][]byte{"the old version": c.old, "the new version": c.new}))
			assert.Zero(t, s.Refused, "recovery refused the cut-off commit")
			assert.Equal(t, 1, s.RolledBack, "the cut-off commit was not rolled back")
			requireRecoverNoop(t, other)
		})
	}
}
