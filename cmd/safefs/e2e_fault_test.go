package main

// Fault tests: strace, attached to the running daemon just before a
// commit (or a write), makes one of the daemon's system calls fail with
// EIO or ENOSPC. The writer must get that errno, the previous version
// must stay byte-identical, and the daemon must go on serving.
//
// Determinism: strace counts "when=1" per thread, so each case injects
// into a system call whose first use after the attach is the step under
// test, on whichever thread runs it, and the commit stops at that
// failure. Where an earlier call of the same kind would come first, -P
// limits the injection to calls on the target (by either of its names) or
// the journal. (-P does not match openat2's dirfd-relative names, so the
// openat2 cases rely on the target's open being the commit's first.)
// strace is detached before the follow-up commit. The order of calls was
// read off a plain `strace -f` of the daemon: a replace commit fsyncs the
// staging file, renames with renameat2, then fsyncs the directory (no
// journal record); an append syncs its journal record (fdatasync), copies with
// copy_file_range and fdatasyncs the target (its end line is not synced); an in-place commit copies the old bytes to undo/
// (copy_file_range unless the file system clones), fsyncs it, rewrites
// the target and fsyncs it. Files are opened with openat2; staging files
// are created at open (O_TRUNC) or first write, not at close.
//
// Left out: faults that would hit the Nth call of a kind (a failure of
// the journal's end-line fsync, of the in-place rewrite's copy) cannot be
// aimed at deterministically with per-thread counters, and pwrite64 is
// not a commit call here (commits copy with copy_file_range), so it is
// tested on the write path and on the copy fallback after EXDEV.

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// lineSink is an io.Writer that hands complete lines to a channel, and
// keeps everything for failure messages.
type lineSink struct {
	lineBuffer
	lines  chan string
	notify chan struct{} // a token after each write
}

func newLineSink() *lineSink {
	s := &lineSink{lines: make(chan string, 4096), notify: make(chan struct{}, 1)}
	s.onLine = func(l string) {
		select {
		case s.lines <- l:
		default: // nobody reads this many: keep only the whole output
		}
	}
	return s
}

func (s *lineSink) Write(p []byte) (int, error) {
	n, err := s.lineBuffer.Write(p)
	select {
	case s.notify <- struct{}{}:
	default:
	}
	return n, err
}

// waitText waits until the output, partial lines included, contains want.
func (s *lineSink) waitText(t *testing.T, what, want string) {
	t.Helper()
	deadline := time.After(waitLimit)
	for !strings.Contains(s.String(), want) {
		select {
		case <-s.notify:
		case <-deadline:
			t.Fatalf("%s printed no %q in %v; output:\n%s", what, want, waitLimit, s)
		}
	}
}

// waitLine waits for a line containing want.
func (s *lineSink) waitLine(t *testing.T, what, want string, exited <-chan struct{}) {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		select {
		case l := <-s.lines:
			if strings.Contains(l, want) {
				return
			}
		case <-exited:
			// Drain what was written before the exit.
			for {
				select {
				case l := <-s.lines:
					if strings.Contains(l, want) {
						return
					}
				default:
					t.Fatalf("%s exited without printing %q; output:\n%s", what, want, s)
				}
			}
		case <-deadline:
			t.Fatalf("%s printed no %q in %v; output:\n%s", what, want, waitLimit, s)
		}
	}
}

// attachStrace attaches strace to pid with the given injections and
// waits until every thread is traced. The returned function detaches.
func attachStrace(t *testing.T, pid int, trace string, paths []string, injects []string) (detach func()) {
	t.Helper()
	_, detach = attachStraceOut(t, pid, "/dev/null", trace, paths, injects)
	return detach
}

// attachStraceOut is attachStrace with the trace written to output
// ("/dev/stderr": into the returned sink, with the attach messages).
func attachStraceOut(t *testing.T, pid int, output, trace string, paths []string, injects []string) (*lineSink, func()) {
	t.Helper()
	args := []string{"-f", "-o", output, "-e", "signal=none", "-e", "trace=" + trace}
	for _, p := range paths {
		args = append(args, "-P", p)
	}
	for _, in := range injects {
		args = append(args, "-e", "inject="+in)
	}
	args = append(args, "-p", fmt.Sprint(pid))
	sink := newLineSink()
	cmd := exec.Command("strace", args...)
	cmd.Stdout, cmd.Stderr = sink, sink
	p := startProc(t, cmd)
	sink.waitLine(t, "strace "+strings.Join(args, " "), "attached", p.exited)
	return sink, func() {
		t.Helper()
		select {
		case <-p.exited:
			t.Fatalf("strace ended before it was detached:\n%s", sink)
		default:
		}
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		p.wait(t)
		assert.NotContains(t, sink.String(), "strace: inject", "strace complained:\n%s", sink)
	}
}

// pausedCommit is a commit.pl run that stops before a step.
type pausedCommit struct {
	p     *proc
	out   *lineSink
	stdin io.WriteCloser
}

func startPausedCommit(t *testing.T, mode, file string, data []byte, step string) *pausedCommit {
	t.Helper()
	src := filepath.Join(t.TempDir(), "src")
	require.NoError(t, os.WriteFile(src, data, 0o600))
	cmd := exec.Command("perl", testdataPath(t, "commit.pl"), mode, file, src, step)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	out := newLineSink()
	cmd.Stdout, cmd.Stderr = out, out
	c := &pausedCommit{p: startProc(t, cmd), out: out, stdin: stdin}
	out.waitLine(t, "commit.pl", "pause "+step, c.p.exited)
	return c
}

// finish lets the script go on and returns all it printed.
func (c *pausedCommit) finish(t *testing.T) string {
	t.Helper()
	_, err := io.WriteString(c.stdin, "go\n")
	require.NoError(t, err)
	closeStdin(t, c.stdin)
	c.p.wait(t)
	return c.out.String()
}

type faultCase struct {
	name    string
	kind    string   // replace, inplace or append: the file set up
	mode    string   // commit.pl mode of the faulty commit
	step    string   // "close": fault in the commit; "write": in a write
	trace   string   // strace -e trace=
	paths   []string // strace -P, relative to BACKING
	injects []string // strace -e inject=
	errno   syscall.Errno
	logWant string // in the daemon's log when the fault hit the step meant
	needCFR bool   // needs copy_file_range to be used for whole-file copies (no reflinks)
	mountO  string // -o for the mount, if any
}

func faultCases() []faultCase {
	var cs []faultCase
	for _, e := range []struct {
		errno syscall.Errno
		name  string
	}{{syscall.EIO, "EIO"}, {syscall.ENOSPC, "ENOSPC"}} {
		in := func(sc string) string { return sc + ":error=" + e.name + ":when=1" }
		cs = append(cs,
			// replace: the first fsync is the staging file's.
			faultCase{name: "replace/fsync-staging/" + e.name, kind: "replace", mode: "replace", step: "close",
				trace: "fsync", injects: []string{in("fsync")}, errno: e.errno, logWant: "fsync staging: "},
			// Only renames into BACKING's top (strace counts per thread:
			// keeping the bytes in rejected/ may run on another one).
			faultCase{name: "replace/renameat2/" + e.name, kind: "replace", mode: "replace", step: "close",
				trace: "renameat2", paths: []string{"."}, injects: []string{in("renameat2")}, errno: e.errno},
			// The target is opened (O_PATH) to copy its xattrs.
			faultCase{name: "replace/openat2-target/" + e.name, kind: "replace", mode: "replace", step: "close",
				trace: "openat2", injects: []string{in("openat2")}, errno: e.errno},
			// Without O_TRUNC the staging file is made at the first write:
			// by name without the staging pool, else named by linkat.
			faultCase{name: "write/openat2-staging/" + e.name, kind: "replace", mode: "update", step: "write",
				trace: "openat2", injects: []string{in("openat2")}, errno: e.errno, mountO: "staging_pool=0"},
			faultCase{name: "write/linkat-staging/" + e.name, kind: "replace", mode: "update", step: "write",
				trace: "linkat", injects: []string{in("linkat")}, errno: e.errno},
			faultCase{name: "write/pwrite64-staging/" + e.name, kind: "replace", mode: "update", step: "write",
				trace: "pwrite64", injects: []string{in("pwrite64")}, errno: e.errno},
			faultCase{name: "append/copy_file_range/" + e.name, kind: "append", mode: "append", step: "close",
				trace: "copy_file_range", injects: []string{in("copy_file_range")}, errno: e.errno},
			// The record is synced (fdatasync) before the target changes.
			faultCase{name: "append/fsync-journal/" + e.name, kind: "append", mode: "append", step: "close",
				trace: "fdatasync", paths: []string{".safefs/journal"}, injects: []string{in("fdatasync")}, errno: e.errno,
				logWant: "/.safefs/journal: "},
			faultCase{name: "append/fdatasync/" + e.name, kind: "append", mode: "append", step: "close",
				trace: "fdatasync", paths: []string{"f"}, injects: []string{in("fdatasync")}, errno: e.errno},
			// A pending append has no name: kept in rejected/ by linkat of
			// its descriptor, or copied where linkat is refused (EPERM
			// for a daemon without CAP_DAC_READ_SEARCH).
			faultCase{name: "append/fdatasync-linkat-refused/" + e.name, kind: "append", mode: "append", step: "close",
				trace: "fdatasync,linkat", paths: []string{"f", ".safefs/rejected"}, injects: []string{in("fdatasync"), "linkat:error=EPERM"}, errno: e.errno},
			// The target is looked at by a stat of its name (the append
			// writes through the handle's own descriptor), then, if that
			// fails, opened O_PATH: both fail.
			faultCase{name: "append/stat-target/" + e.name, kind: "append", mode: "append", step: "close",
				trace: "newfstatat,openat2", injects: []string{in("newfstatat"), in("openat2")}, errno: e.errno},
			// copy_file_range refused with EXDEV: the plain copy's pwrite64 fails.
			faultCase{name: "append/pwrite64-fallback/" + e.name, kind: "append", mode: "append", step: "close",
				trace:   "copy_file_range,pwrite64",
				injects: []string{"copy_file_range:error=EXDEV:when=1", in("pwrite64")}, errno: e.errno,
				logWant: `"error": "write f: `},
			// Both names of the target fail: the commit tries each.
			faultCase{name: "inplace/openat2-target/" + e.name, kind: "inplace", mode: "replace", step: "close",
				trace: "openat2", injects: []string{"openat2:error=" + e.name + ":when=1..2"}, errno: e.errno},
			// The first copy touching the target is the one into undo/.
			faultCase{name: "inplace/copy_file_range-undo/" + e.name, kind: "inplace", mode: "replace", step: "close",
				trace: "copy_file_range", paths: []string{"f", "g"}, injects: []string{in("copy_file_range")}, errno: e.errno, needCFR: true},
			// The daemon opens the target by either of its names: -P both.
			// The target's fsync ends the rewrite: the old bytes are copied back.
			faultCase{name: "inplace/fsync-target/" + e.name, kind: "inplace", mode: "replace", step: "close",
				trace: "fsync", paths: []string{"f", "g"}, injects: []string{in("fsync")}, errno: e.errno},
		)
	}
	return cs
}

// reflinks reports whether dir's file system clones files (FICLONE), in
// which case whole-file copies never call copy_file_range.
func reflinks(t *testing.T, dir string) bool {
	t.Helper()
	a, err := os.CreateTemp(dir, "clone-a")
	require.NoError(t, err)
	defer a.Close()
	b, err := os.CreateTemp(dir, "clone-b")
	require.NoError(t, err)
	defer b.Close()
	_, err = a.WriteString("x")
	require.NoError(t, err)
	return unix.IoctlFileClone(int(b.Fd()), int(a.Fd())) == nil
}

func TestFaultInjection(t *testing.T) {
	requireFuse(t)
	requireTool(t, "perl")
	requireTool(t, "strace")
	for _, c := range faultCases() {
		t.Run(c.name, func(t *testing.T) { testFault(t, c) })
	}
}

func testFault(t *testing.T, c faultCase) {
	backing, mnt := tempDir(t), tempDir(t)
	if c.needCFR && reflinks(t, backing) {
		t.Skip("the backing file system has reflinks: whole-file copies clone instead of calling copy_file_range")
	}
	target := filepath.Join(backing, "f")
	var p *mountProc
	if c.mountO != "" {
		p = launchMount(t, exec.Command(safefsBin, "mount", "-o", c.mountO, backing, mnt), mnt)
		p.waitMounted(t)
	} else {
		p = startMountWith(t, backing, mnt, "")
	}
	old := testVersion("old", 1000)
	require.NoError(t, os.WriteFile(filepath.Join(mnt, "f"), old, 0o644))
	if c.kind == "inplace" {
		require.NoError(t, os.Link(filepath.Join(mnt, "f"), filepath.Join(mnt, "g")))
	}
	before := statID(t, target)

	w := startPausedCommit(t, c.mode, filepath.Join(mnt, "f"), testVersion("new", 3000), c.step)
	var paths []string
	for _, rel := range c.paths {
		paths = append(paths, filepath.Join(backing, rel))
	}
	detach := attachStrace(t, p.cmd.Process.Pid, c.trace, paths, c.injects)
	out := strings.Replace(w.finish(t), "pause "+c.step+"\n", "", 1)
	detach()

	if c.step == "close" {
		assert.Contains(t, p.out.String(), "commit rejected, previous version kept", "daemon log")
	}
	if c.logWant != "" {
		assert.Contains(t, p.out.String(), c.logWant, "the fault hit another step than meant")
	}
	errLine := fmt.Sprintf("err %d ", c.errno)
	switch c.step {
	case "close":
		// A failed commit drops its staging (and undo) file before
		// close() returns.
		assertNoTemp(t, backing)
		assertRejected(t, backing, testVersion("new", 3000))
		assert.True(t, strings.HasPrefix(out, "open ok\nwrite ok\nclose "+errLine),
			"want close() to fail with %v; commit.pl printed:\n%s", c.errno, out)
	case "write":
		assert.True(t, strings.HasPrefix(out, "open ok\nwrite "+errLine),
			"want write() to fail with %v; commit.pl printed:\n%s", c.errno, out)
		assert.Contains(t, out, "close ok\n", "nothing was written, so close has nothing to commit")
	}

	got, err := os.ReadFile(target)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(old, got), "after the fault f holds %s, not the previous version",
		describe(got, map[string][]byte{"the new version": testVersion("new", 3000)}))
	now := statID(t, target)
	assert.Equal(t, before, now, "the fault changed the file's identity or metadata")

	// The daemon goes on serving.
	select {
	case <-p.exited:
		t.Fatalf("the daemon died after the fault; stderr:\n%s", p.out)
	default:
	}
	next, mode := testVersion("next", 700), "replace"
	if c.mode == "append" {
		mode = "append"
	}
	commitOK(t, mode, filepath.Join(mnt, "f"), next)
	if mode == "append" {
		next = slices.Concat(old, next)
	}
	for _, dir := range []string{mnt, backing} {
		b, err := os.ReadFile(filepath.Join(dir, "f"))
		require.NoError(t, err)
		assert.True(t, bytes.Equal(next, b), "the commit after the fault, read back from %s", dir)
	}
	if c.kind == "inplace" {
		assert.Equal(t, statID(t, target).Ino, statID(t, filepath.Join(backing, "g")).Ino, "hard links split")
	}
	stopMount(t, p)

	s := recoverBacking(t, backing)
	assert.Zero(t, s.Orphans, "staging or undo files left behind")
	assert.Zero(t, s.RolledBack+s.Refused, "recovery found a commit to undo")
	if !strings.Contains(c.name, "fsync-journal") {
		// A failed journal fsync in Begin keeps its record open by design
		// (recovery then finds the target untouched).
		assert.Equal(t, recoverSummary{}, s, "a clean unmount leaves nothing to recover")
	}
	assertNoDebris(t, backing)
	requireRecoverNoop(t, backing)
}

// TestFaultDelayedOpenReadsLatest: a read-write handle that has not
// written yet must read the latest committed version (see fs/handle.go),
// also when its open raced with a commit. strace delays the daemon's open
// of the file between opening the backing file and returning (the
// fcntl(F_GETFL) os.NewFile makes, the only call on that file's path in
// the window); a commit completes meanwhile; then the handle reads.
//
// The delay only has to outlast one commit. If the commit outlasted it
// anyway (a very loaded machine), the race was not reproduced: the
// attempt still checks what the handle reads, and the test tries again
// with a longer delay. If no attempt reproduces the race, the test fails
// in CI (skips elsewhere): it must not pass without testing the race.
func TestFaultDelayedOpenReadsLatest(t *testing.T) {
	requireFuse(t)
	requireTool(t, "perl")
	requireTool(t, "strace")
	// The reader's open makes about three such calls, each held for the
	// delay: three times the longest must stay well within waitLimit,
	// the hang guard of the wait for the reader's open.
	delays := []time.Duration{4 * time.Second, 8 * time.Second, 12 * time.Second}
	for _, delay := range delays {
		reproduced := false
		t.Run(fmt.Sprintf("delay=%v", delay), func(t *testing.T) { reproduced = cptDelayedOpen(t, delay) })
		if reproduced || t.Failed() {
			return
		}
	}
	msg := fmt.Sprintf("every commit outlasted its delay (%v): the race was never reproduced", delays)
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// cptDelayedOpen is one attempt of TestFaultDelayedOpenReadsLatest with
// the open held for delay. It reports whether the commit completed while
// the open was held (the race the test is about).
func cptDelayedOpen(t *testing.T, delay time.Duration) (reproduced bool) {
	backing, mnt := tempDir(t), tempDir(t)
	p := startMountWith(t, backing, mnt, "")
	file := filepath.Join(mnt, "f")
	require.NoError(t, os.WriteFile(file, []byte("old\n"), 0o644))

	// The writer is ready to commit: opened and written before strace.
	a := startPausedCommit(t, "replace", file, []byte("new\n"), "close")

	trace, detach := attachStraceOut(t, p.cmd.Process.Pid, "/dev/stderr", "fcntl",
		[]string{filepath.Join(backing, "f")}, []string{fmt.Sprintf("fcntl:delay_enter=%d", delay.Microseconds())})

	bcmd := exec.Command("perl", testdataPath(t, "rw_reader.pl"), file)
	bin, err := bcmd.StdinPipe()
	require.NoError(t, err)
	bout := newLineSink()
	bcmd.Stdout, bcmd.Stderr = bout, bout
	b := startProc(t, bcmd)
	trace.waitText(t, "strace", "fcntl(") // the reader's open is held in the daemon

	aout := strings.Replace(a.finish(t), "pause close\n", "", 1)
	require.Equal(t, "open ok\nwrite ok\nclose ok\n", aout)
	// The delayed call has not returned yet: the commit happened while
	// the open was held.
	reproduced = !strings.Contains(trace.String(), "resumed") && !strings.Contains(trace.String(), "DELAYED")
	if !reproduced {
		t.Logf("the commit outlasted the %v delay: the race was not reproduced; strace:\n%s", delay, trace)
	}
	bout.waitLine(t, "rw_reader.pl", "open ok", b.exited)
	detach()

	_, err = io.WriteString(bin, "go\n")
	require.NoError(t, err)
	closeStdin(t, bin)
	b.wait(t)
	out := bout.String()
	assert.Contains(t, out, "read "+hex.EncodeToString([]byte("new\n")),
		"a read-write handle opened during a commit, reading after that commit's close() returned, "+
			"reads the old version (read 6f6c640a = \"old\\n\"); output:\n%s", out)
	stopMount(t, p)
	return reproduced
}

// assertRejected checks that the failed commit's bytes, want, were kept
// in rejected/ for the operator.
func assertRejected(t *testing.T, backing string, want []byte) {
	t.Helper()
	dir := filepath.Join(backing, ".safefs", "rejected")
	names, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, names, 1, "files in rejected/")
	got, err := os.ReadFile(filepath.Join(dir, names[0].Name()))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got), "rejected/ holds %d bytes, not the %d of the failed commit", len(got), len(want))
}
