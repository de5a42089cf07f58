package main

// A replace's rename is the commit point, and a rename is durable only
// once its directory is fsynced: until then a power loss can undo it,
// after the writer's close() returned 0. This test watches that from
// the outside: strace follows the real daemon and the writer together,
// and the directory's fsync must end after the rename and before the
// writer's close() returns. strace stops each traced thread at every
// system call it traces until it has printed it, so the order of the
// lines is the order of those events: the daemon cannot answer the
// close before strace printed the end of its fsync.
//
// (A power cut simulated with dm-flakey would show the same, but only
// when the kernel had not yet written the rename for its own reasons,
// such as ext4's journal commit every few seconds or another fsync on
// the file system: it could pass without the fsync.)

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReplaceDirSyncedBeforeClose(t *testing.T) {
	requireFuse(t)
	requireTool(t, "perl")
	requireTool(t, "strace")
	for _, dir := range []string{".", "sub"} {
		t.Run("dir="+dir, func(t *testing.T) { testReplaceDirSynced(t, dir) })
	}
}

func testReplaceDirSynced(t *testing.T, dir string) {
	backing, mnt := tempDir(t), tempDir(t)
	require.NoError(t, os.MkdirAll(filepath.Join(backing, dir), 0o755))
	rel := filepath.Join(dir, "doc.txt")
	require.NoError(t, os.WriteFile(filepath.Join(backing, rel), testVersion("old", 1000), 0o644))
	p := launchMount(t, exec.Command(safefsBin, "mount", "-o", "durability=full", backing, mnt), mnt)
	p.waitMounted(t)

	w := startPausedCommit(t, "replace", filepath.Join(mnt, rel), testVersion("new", 4000), "close")
	traceFile := filepath.Join(t.TempDir(), "trace")
	daemon, writer := p.cmd.Process.Pid, w.p.cmd.Process.Pid
	args := []string{"-f", "-y", "-o", traceFile, "-e", "signal=none", "-e", "trace=renameat2,renameat,?rename,fsync,fdatasync,close",
		"-p", strconv.Itoa(daemon), "-p", strconv.Itoa(writer)}
	sink := newLineSink()
	cmd := exec.Command("strace", args...)
	cmd.Stdout, cmd.Stderr = sink, sink
	st := startProc(t, cmd)
	for _, pid := range []int{daemon, writer} {
		sink.waitText(t, "strace "+strings.Join(args, " "), "Process "+strconv.Itoa(pid)+" attached")
	}
	out := strings.Replace(w.finish(t), "pause close\n", "", 1)
	require.NoError(t, st.cmd.Process.Signal(syscall.SIGTERM))
	st.wait(t)
	stopMount(t, p)
	require.Equal(t, "open ok\nwrite ok\nclose ok\n", out, "commit.pl replace %s", rel)

	b, err := os.ReadFile(traceFile)
	require.NoError(t, err)
	calls := dirsyncParse(string(b))
	target, parent, onMount := filepath.Join(backing, rel), filepath.Clean(filepath.Join(backing, dir)), filepath.Join(mnt, rel)
	// Each call's place is the line its result is on.
	renamed, synced, closed := -1, -1, -1
	for i, c := range calls {
		switch {
		case renamed < 0 && strings.HasPrefix(c.name, "rename") && c.ret == "0" && c.target() == target:
			renamed = i
		case renamed >= 0 && synced < 0 && (c.name == "fsync" || c.name == "fdatasync") && c.ret == "0" && c.fd(0) == parent:
			synced = i
		case closed < 0 && c.tid == strconv.Itoa(writer) && c.name == "close" && c.fd(0) == onMount:
			closed = i
			require.Equal(t, "0", c.ret, "the writer's close: %s", c.line)
		}
	}
	require.GreaterOrEqual(t, closed, 0, "no close(%s) of the writer in the trace: the trace is broken:\n%s", onMount, b)
	require.GreaterOrEqual(t, renamed, 0, "no rename onto %s in the daemon's trace: the trace is broken:\n%s", target, b)
	require.Less(t, renamed, closed, "the writer's close returned before the daemon renamed the new version in place:\n%s", b)
	require.GreaterOrEqual(t, synced, 0, "the daemon renamed the new version onto %s, and never fsynced the directory %s after that: "+
		"a power loss can undo a commit whose close returned 0 (fs/commit_replace.go):\n%s", target, parent, b)
	assert.Less(t, synced, closed, "the writer's close returned 0 before the daemon fsynced the directory %s after the rename: "+
		"a power loss in between undoes a commit the writer was told was made:\n%s", parent, b)
}

// dirsyncCall is one system call of an `strace -f -y` trace, its two
// halves joined, placed at the line of its result.
type dirsyncCall struct {
	tid, name, args, ret, line string
}

// fd is the path of the i-th fd argument (strace -y prints fd<path>).
func (c dirsyncCall) fd(i int) string {
	m := cptFdPathRE.FindAllStringSubmatch(cptStringRE.ReplaceAllString(c.args, `""`), -1)
	if i < len(m) {
		return strings.TrimSuffix(m[i][1], " (deleted)")
	}
	return ""
}

// target is where a rename puts its file: renameat(2)'s new directory
// and name, or rename(2)'s new path.
func (c dirsyncCall) target() string {
	strs := cptStringRE.FindAllString(c.args, -1)
	for i, q := range strs {
		if s, err := strconv.Unquote(strings.TrimSuffix(q, "...")); err == nil {
			strs[i] = s
		}
	}
	if c.name == "rename" {
		if len(strs) == 2 {
			return strs[1]
		}
		return ""
	}
	if len(strs) < 2 || c.fd(1) == "" {
		return ""
	}
	return filepath.Join(c.fd(1), strs[1])
}

func dirsyncParse(trace string) []dirsyncCall {
	var calls []dirsyncCall
	pending := map[string]*dirsyncCall{}
	for _, l := range strings.Split(trace, "\n") {
		m := cptLineRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		tid, rest := m[1], m[2]
		if rm := cptResumedRE.FindStringSubmatch(rest); rm != nil {
			c := pending[tid]
			delete(pending, tid)
			if c == nil || c.name != rm[1] {
				continue // entered before strace attached
			}
			c.line += " ..." + rm[2]
			c.args, c.ret = dirsyncResult(c.args + rm[2])
			calls = append(calls, *c)
			continue
		}
		em := cptEntryRE.FindStringSubmatch(rest)
		if em == nil {
			continue // +++ exited, --- signals
		}
		c := &dirsyncCall{tid: tid, name: em[1], line: l}
		if body, ok := strings.CutSuffix(em[2], cptUnfinished); ok {
			c.args = body
			pending[tid] = c
			continue
		}
		c.args, c.ret = dirsyncResult(em[2])
		calls = append(calls, *c)
	}
	return calls
}

// dirsyncResult splits "ARGS) = RET ..." into the arguments and the
// result ("?" if it never returned).
func dirsyncResult(s string) (args, ret string) {
	if m := cptRetRE.FindStringSubmatch(s); m != nil {
		return m[1], m[2]
	}
	return s, "?"
}
