package main

// Crash-point coverage. The crash test (e2e_crash_test.go) can cut a commit
// only where fs.CrashPoints lets it, so this test checks, from the
// daemon's own system calls, that those points fall between every two
// durable steps of every commit kind, and that each point is reached.
//
// The steps: one commit of each kind (replace: a file with one link
// rewritten; inplace: a file with two hard links rewritten; append) runs
// through the real daemon with durability=full (the mode with the most
// steps) under `strace -f -y`. strace is attached while the writer is
// paused before its close(), so the trace holds that commit only. Of the
// calls traced (cptTraceCalls), those that change what is on disk or make
// it durable (writes, copies, truncations, metadata changes, creations,
// renames, links, unlinks, fsync and fdatasync), on files under BACKING,
// are kept, failed ones dropped. Each gets the role of the file it
// changes: journal, staging, undo, target (the committed file, or the name
// a rename or link puts in place), dir (BACKING itself, fsynced after a
// rename). A step is a run of calls on one role; the next role begins the
// next step. (So two changes of one file in a row are one step: a crash
// point between them is allowed, not required.)
//
// The points: the same commit runs again once per crash point of its kind
// (named "<kind>-<step>"), with SAFEFS_CRASH_AT set and under strace. The
// daemon must die there (by SIGKILL, logging "crash point reached" with
// the point, its kill(2) of itself in the trace), and the calls it made
// before that kill locate the point: they must be the first calls of the
// plain commit, optionally followed by a part of its next step (a point
// may cut through a step, as append-half cuts the copy). The points must
// come in the order fs.CrashPoints lists them (e2e_crash_test.go relies on
// it), and every boundary between two steps must have a point, except
// those listed in cptKnownGaps (each of which must still be a gap, so the
// list cannot go stale). So the test fails when a commit gains a durable
// step without a crash point before it, when a point is no longer reached
// or no longer where its order says, and when a kind has no points.
//
// It also checks what crash recovery rests on: before the first change of
// the target, a journal record was written and fsynced (append, inplace),
// or the staging file was fsynced (replace: no record, see docs/design.md).

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/safefs/safefs/fs"
)

// cptTraceCalls are the system calls traced. A "?" lets strace accept a
// name its architecture lacks (the old path calls on arm64).
const cptTraceCalls = "write,pwrite64,writev,pwritev,pwritev2,ftruncate,fallocate,copy_file_range," +
	"fsync,fdatasync,sync_file_range,renameat2,renameat,unlinkat,linkat,openat,openat2,mkdirat,mknodat," +
	"fchmod,fchmodat,fchown,fchownat,fsetxattr,setxattr,lsetxattr,fremovexattr,removexattr,lremovexattr," +
	"truncate,ioctl,kill,tgkill,?rename,?unlink,?link,?open,?creat,?mkdir,?chmod,?chown,?lchown"

// cptKnownGaps are boundaries between two steps of a commit that no crash
// point cuts today, keyed "<kind>: <last call of a step> | <first call of
// the next>". Each is a state the crash test never produces. They are
// listed, not hidden: a new gap fails the test, and so does an entry here
// that is no longer a gap (a crash point was added: remove the entry).
var cptKnownGaps = map[string]string{
	// After inplace-ended the record is ended: removing the staging file
	// and then the undo copy is cleanup. A crash between the two leaves
	// an orphan undo/ file that recovery sweeps like any other, which
	// inplace-ended (both left) already exercises.
	"inplace: unlinkat(staging) | unlinkat(undo)": "record ended, staging gone, undo copy not yet removed",
}

// cptCall is a system call of the daemon that changed a file under
// BACKING or made it durable.
type cptCall struct {
	name  string // the system call
	role  string // journal, staging, undo, rejected, target, dir, or "other REL"
	bytes int64  // bytes written or copied into staging, undo or the target; 0 otherwise
	line  string // the strace line, for messages
}

// key is what must match between two runs of one commit: the journal's
// lines differ (inode numbers, ids), the bytes moved into files do not.
func (c cptCall) key() string {
	return fmt.Sprintf("%s(%s) %d", c.name, c.role, c.bytes)
}

func (c cptCall) String() string { return c.name + "(" + c.role + ")" }

func TestCrashPointsCoverCommitSteps(t *testing.T) {
	requireFuse(t)
	requireTool(t, "perl")
	requireTool(t, "strace")
	byKind := map[string][]string{}
	var kinds []string
	for _, point := range fs.CrashPoints {
		kind, step, _ := strings.Cut(point, "-")
		require.NotEmpty(t, step, "crash point %q is not named <kind>-<step>", point)
		_, ok := crashCaseFor(kind)
		require.True(t, ok, "crash point %q is of no commit kind this test knows (replace, inplace, append, redo): teach it", point)
		if slices.Contains(redoCheckpointPoints, point) {
			continue // after the commit's close: TestCrashRedo reaches them
		}
		if byKind[kind] == nil {
			kinds = append(kinds, kind)
		}
		byKind[kind] = append(byKind[kind], point)
	}
	// The three commit kinds (docs/design.md) each need crash points, and so does
	// an append's redo form.
	assert.ElementsMatch(t, []string{"replace", "inplace", "append", "redo"}, kinds, "commit kinds with crash points")
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) { cptCheckKind(t, kind, byKind[kind]) })
	}
}

func cptCheckKind(t *testing.T, kind string, points []string) {
	c, _ := crashCaseFor(kind)
	plain, _ := cptRun(t, c, "")
	var lines []string
	for _, call := range plain {
		lines = append(lines, call.line)
	}
	t.Logf("%s commit, durable calls:\n%s", kind, strings.Join(lines, "\n"))
	var roles []string
	for _, call := range plain {
		roles = append(roles, call.role)
	}
	// A trace that saw nothing would pass everything below.
	require.Contains(t, roles, "target", "no change of the target in the %s commit's trace: the trace is broken", kind)
	if kind == "replace" {
		// Its rename is the commit point, and a staging file left by a
		// crash is an orphan: no record (docs/design.md, crash consistency).
		assert.NotContains(t, roles, "journal", "a replace commit wrote the journal")
		cptStagingSyncedFirst(t, plain)
		cptDirSyncedAfterRename(t, plain)
	} else {
		require.Contains(t, roles, "journal", "no journal write in the %s commit's trace: the trace is broken", kind)
		cptJournalFirst(t, plain)
	}

	// Each point's position: 2i when it falls just before plain[i], 2i+1
	// when it cuts through the step plain[i] belongs to.
	pos := map[string]int{}
	for _, point := range points {
		crashed, reached := cptRun(t, c, point)
		if !reached {
			continue
		}
		p, err := cptPosition(plain, crashed)
		if !assert.NoError(t, err, "crash point %s", point) {
			continue
		}
		pos[point] = p
		t.Logf("%s: %s", point, cptDescribe(plain, p))
	}
	if len(pos) < len(points) {
		return // positions are missing: the coverage would be wrong
	}
	for i := 1; i < len(points); i++ {
		a, b := pos[points[i-1]], pos[points[i]]
		switch {
		case a == b:
			t.Errorf("crash points %s and %s are both reached %s, with no durable step of the %s commit between them: "+
				"the step that was between them is gone (or one of the two points is not needed); the commit's durable calls are logged above",
				points[i-1], points[i], cptDescribe(plain, a), kind)
		case a > b:
			t.Errorf("%s comes after %s in fs.CrashPoints (commit order) but before it in the commit (%s, against %s)",
				points[i], points[i-1], cptDescribe(plain, b), cptDescribe(plain, a))
		}
	}
	gaps := map[string]bool{}
	for i := 1; i < len(plain); i++ {
		if plain[i-1].role == plain[i].role {
			continue
		}
		boundary := fmt.Sprintf("%s: %s | %s", kind, plain[i-1], plain[i])
		covered := slices.ContainsFunc(points, func(p string) bool { return pos[p] == 2*i })
		switch {
		case covered:
		case cptKnownGaps[boundary] != "":
			gaps[boundary] = true
			t.Logf("known gap, no crash point at %q (%s)", boundary, cptKnownGaps[boundary])
		default:
			t.Errorf("no crash point between two durable steps of the %s commit: %q\n(add r.crash(\"%s-...\") there "+
				"in fs/commit.go and to fs.CrashPoints)", kind, boundary, kind)
		}
	}
	for boundary := range cptKnownGaps {
		if strings.HasPrefix(boundary, kind+": ") {
			assert.True(t, gaps[boundary], "cptKnownGaps lists %q, which is no longer an uncovered boundary of the "+
				"%s commit: remove it", boundary, kind)
		}
	}
}

// cptJournalFirst requires a journal write, then a journal fsync, before
// the first change of the target.
func cptJournalFirst(t *testing.T, calls []cptCall) {
	t.Helper()
	written, synced := false, false
	for _, c := range calls {
		switch {
		case c.role == "journal" && strings.HasPrefix(c.name, "write"):
			written, synced = true, false
		case c.role == "journal" && (c.name == "fsync" || c.name == "fdatasync") && written:
			synced = true
		case c.role == "target":
			assert.True(t, written && synced, "the target changed (%s) before a journal record was written and fsynced", c.line)
			return
		}
	}
}

// cptStagingSyncedFirst requires the staging file's fsync before the
// rename that puts it in place (durability=full).
func cptStagingSyncedFirst(t *testing.T, calls []cptCall) {
	t.Helper()
	synced := false
	for _, c := range calls {
		switch {
		case c.role == "staging" && (c.name == "fsync" || c.name == "fdatasync"):
			synced = true
		case c.role == "target":
			assert.True(t, synced, "the staging file was renamed in place (%s) before it was fsynced", c.line)
			return
		}
	}
}

// cptDirSyncedAfterRename requires an fsync of the directory after the
// rename that puts the staging file in place (durability=full): until
// then a power loss can undo the rename. TestReplaceDirSyncedBeforeClose
// checks that it comes before the writer's close returns.
func cptDirSyncedAfterRename(t *testing.T, calls []cptCall) {
	t.Helper()
	for i, c := range calls {
		if c.role == "target" && strings.HasPrefix(c.name, "rename") {
			synced := slices.ContainsFunc(calls[i+1:], func(d cptCall) bool {
				return d.role == "dir" && (d.name == "fsync" || d.name == "fdatasync")
			})
			assert.True(t, synced, "the staging file was renamed in place (%s) and the directory was not fsynced after it: "+
				"a power loss can undo the commit", c.line)
			return
		}
	}
}

// cptPosition locates a crash point from the calls made before it.
func cptPosition(plain, crashed []cptCall) (int, error) {
	n := 0
	for n < len(crashed) && n < len(plain) && crashed[n].key() == plain[n].key() {
		n++
	}
	if n == len(crashed) {
		return 2 * n, nil
	}
	if n == len(plain) {
		return 0, fmt.Errorf("after all the calls of the commit it made more: %s", crashed[n].line)
	}
	for _, c := range crashed[n:] {
		if c.role != plain[n].role {
			return 0, fmt.Errorf("it made a call the commit does not make there: %s\ninstead of: %s", c.line, plain[n].line)
		}
	}
	return 2*n + 1, nil
}

// cptRun commits c under strace with point ("" for none) as the crash
// point, and returns the durable calls the daemon made until it died or
// the commit ended. reached is false if the daemon did not die at point.
func cptRun(t *testing.T, c crashCase, point string) (calls []cptCall, reached bool) {
	t.Helper()
	backing, mnt := tempDir(t), tempDir(t)
	require.NoError(t, os.WriteFile(filepath.Join(backing, c.name), c.old, 0o644))
	if c.alias != "" {
		require.NoError(t, os.Link(filepath.Join(backing, c.name), filepath.Join(backing, c.alias)))
	}
	cmd := exec.Command(safefsBin, "mount", "-o", "durability=full", backing, mnt)
	cmd.Env = append(os.Environ(), crashEnv+"="+point)
	p := launchMount(t, cmd, mnt)
	p.waitMounted(t)
	w := startPausedCommit(t, c.mode, filepath.Join(mnt, c.name), c.new, "close")
	traceFile := filepath.Join(t.TempDir(), "trace")
	st := cptStrace(t, p.cmd.Process.Pid, traceFile)
	out := strings.Replace(w.finish(t), "pause close\n", "", 1)
	if point == "" || strings.Contains(out, "close ok") {
		require.NoError(t, st.cmd.Process.Signal(syscall.SIGTERM))
		st.wait(t)
		stopMount(t, p)
		if point != "" {
			t.Errorf("crash point %s was not reached: the commit completed and the daemon lives; its log:\n%s", point, p.out)
			return nil, false
		}
		require.Equal(t, "open ok\nwrite ok\nclose ok\n", out, "commit.pl %s %s", c.mode, c.name)
	} else {
		waitKilled(t, p)
		st.wait(t) // strace ends with its tracee
		unmountIfMounted(t, mnt)
		assert.Contains(t, out, "close err", "commit.pl, the daemon dying in its close")
		require.Contains(t, p.out.String(), "crash point reached", "the daemon died, but not at a crash point")
		require.Contains(t, p.out.String(), `"point": "`+point+`"`, "the daemon died at another crash point")
	}
	b, err := os.ReadFile(traceFile)
	require.NoError(t, err)
	calls, killed, err := cptParse(string(b), backing, c, p.cmd.Process.Pid)
	require.NoError(t, err, "strace output:\n%s", b)
	if point != "" {
		require.True(t, killed, "no kill(2) of the daemon by itself in the trace of crash point %s:\n%s", point, b)
	}
	return calls, true
}

// cptStrace attaches strace to every thread of pid, writing to file.
func cptStrace(t *testing.T, pid int, file string) *proc {
	t.Helper()
	args := []string{"-f", "-y", "-o", file, "-e", "signal=none", "-e", "trace=" + cptTraceCalls, "-p", strconv.Itoa(pid)}
	sink := newLineSink()
	cmd := exec.Command("strace", args...)
	cmd.Stdout, cmd.Stderr = sink, sink
	p := startProc(t, cmd)
	sink.waitLine(t, "strace "+strings.Join(args, " "), "attached", p.exited)
	return p
}

var (
	// PID NAME(ARGS) = RET, or the first or second half of one.
	cptLineRE     = regexp.MustCompile(`^(\d+) +(.*)$`)
	cptEntryRE    = regexp.MustCompile(`^([a-z0-9_]+)\((.*)$`)
	cptResumedRE  = regexp.MustCompile(`^<\.\.\. ([a-z0-9_]+) resumed>(.*)$`)
	cptRetRE      = regexp.MustCompile(`^(.*)\) += (-?\d+|\?|0x[0-9a-f]+)(<[^>]*>)?(.*)$`)
	cptStringRE   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"(?:\.\.\.)?`)
	cptFdPathRE   = regexp.MustCompile(`(?:-?\d+|AT_FDCWD)<([^<>]*)>`)
	cptUnfinished = " <unfinished ...>"
)

// cptRaw is one system call as strace printed it (both halves joined).
type cptRaw struct {
	pid, name, args, ret, retPath string
	line                          string
}

// cptParse reads an `strace -f -y` trace: the durable calls on files
// under backing, in the order they were entered, and whether pid killed
// itself with SIGKILL (the calls after that are not kept).
func cptParse(trace, backing string, c crashCase, pid int) (calls []cptCall, killed bool, err error) {
	var raws []*cptRaw
	pending := map[string]*cptRaw{}
	for _, l := range strings.Split(trace, "\n") {
		m := cptLineRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		tid, rest := m[1], m[2]
		if strings.HasPrefix(rest, "+++") || strings.HasPrefix(rest, "---") || strings.HasPrefix(rest, "???") ||
			strings.HasPrefix(rest, "<... ???") {
			continue
		}
		if rm := cptResumedRE.FindStringSubmatch(rest); rm != nil {
			r := pending[tid]
			delete(pending, tid)
			if r == nil || r.name != rm[1] {
				// Started before strace attached: not in the commit.
				continue
			}
			r.line += " ..." + rm[2]
			r.finish(r.args + rm[2])
			continue
		}
		em := cptEntryRE.FindStringSubmatch(rest)
		if em == nil {
			return nil, false, fmt.Errorf("unexpected strace line %q", l)
		}
		r := &cptRaw{pid: tid, name: em[1], line: l}
		raws = append(raws, r)
		if body, ok := strings.CutSuffix(em[2], cptUnfinished); ok {
			r.args = body
			pending[tid] = r
			continue
		}
		r.finish(em[2])
	}
	for _, r := range raws {
		if r.crashMarker(pid) {
			return calls, true, nil
		}
		if call, ok := r.durable(backing, c); ok {
			calls = append(calls, call)
		}
	}
	return calls, false, nil
}

// finish splits "ARGS) = RET" into the arguments and the result.
func (r *cptRaw) finish(s string) {
	if m := cptRetRE.FindStringSubmatch(s); m != nil {
		r.args, r.ret, r.retPath = m[1], m[2], m[3]
	} else {
		r.args = s
	}
}

// crashMarker: kill(pid, SIGKILL) or tgkill(pid, tid, SIGKILL), at entry.
func (r *cptRaw) crashMarker(pid int) bool {
	if r.name != "kill" && r.name != "tgkill" {
		return false
	}
	f := strings.Split(r.args, ",")
	return strings.TrimSpace(f[0]) == strconv.Itoa(pid) && strings.TrimSpace(f[len(f)-1]) == "SIGKILL"
}

// durable turns a call that succeeded and changed a file under backing
// into a cptCall.
func (r *cptRaw) durable(backing string, c crashCase) (cptCall, bool) {
	ret, err := strconv.ParseInt(r.ret, 0, 64)
	if err != nil || ret < 0 {
		return cptCall{}, false // failed, or never returned
	}
	// Quoted strings first: they may hold anything, fd paths included.
	var strs []string
	for _, q := range cptStringRE.FindAllString(r.args, -1) {
		s, err := strconv.Unquote(strings.TrimSuffix(q, "..."))
		if err != nil {
			s = q
		}
		strs = append(strs, s)
	}
	var fds []string
	for _, m := range cptFdPathRE.FindAllStringSubmatch(cptStringRE.ReplaceAllString(r.args, `""`), -1) {
		fds = append(fds, strings.TrimSuffix(m[1], " (deleted)"))
	}
	at := func(i int) string { // the fd's path
		if i < len(fds) {
			return fds[i]
		}
		return ""
	}
	name := func(fd, s int) string { // a name relative to a directory fd
		if fd < len(fds) && s < len(strs) {
			return filepath.Join(fds[fd], strs[s])
		}
		return ""
	}
	abs := func(s int) string { // an absolute path argument (the daemon makes no relative ones)
		if s < len(strs) && filepath.IsAbs(strs[s]) {
			return strs[s]
		}
		return ""
	}
	var path string
	var moved int64
	switch r.name {
	case "write", "pwrite64", "writev", "pwritev", "pwritev2":
		path, moved = at(0), ret
	case "copy_file_range":
		path, moved = at(1), ret
	case "ftruncate", "fallocate", "fsync", "fdatasync", "sync_file_range", "fchmod", "fchown", "fsetxattr", "fremovexattr":
		path = at(0)
	case "ioctl":
		if strings.Contains(r.args, "FICLONE") { // a reflink copy into the fd's file
			path = at(0)
		}
	case "renameat2", "renameat", "linkat":
		path = name(1, 1)
	case "unlinkat", "mkdirat", "mknodat", "fchmodat", "fchownat":
		path = name(0, 0)
	case "truncate", "unlink", "mkdir", "chmod", "chown", "lchown", "setxattr", "lsetxattr", "removexattr", "lremovexattr":
		path = abs(0)
	case "rename", "link":
		path = abs(1)
	case "openat", "openat2", "open", "creat":
		if r.name == "creat" || strings.Contains(r.args, "O_CREAT") {
			path = strings.TrimSuffix(strings.Trim(r.retPath, "<>"), " (deleted)")
		}
	}
	rel, err := filepath.Rel(backing, path)
	if path == "" || err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return cptCall{}, false
	}
	call := cptCall{name: r.name, role: cptRole(rel, c), line: r.line}
	if call.role != "journal" {
		call.bytes = moved
	}
	return call, true
}

// cptRole names the part a file under BACKING plays in a commit.
func cptRole(rel string, c crashCase) string {
	for _, d := range []string{"staging", "undo", "rejected"} {
		if rel == fs.InternalDir+"/"+d || strings.HasPrefix(rel, fs.InternalDir+"/"+d+"/") {
			return d
		}
	}
	switch {
	case rel == fs.InternalDir+"/journal" || strings.HasPrefix(rel, fs.InternalDir+"/journal."):
		return "journal"
	case rel == ".":
		return "dir"
	case rel == c.name || (c.alias != "" && rel == c.alias):
		return "target"
	}
	return "other " + rel
}

// cptDescribe says where a crash point's position (cptPosition) is in
// the plain commit's durable calls, naming them.
func cptDescribe(plain []cptCall, pos int) string {
	i, n := pos/2, len(plain)
	switch {
	case pos%2 == 1:
		return fmt.Sprintf("within the step of call %d of %d, %s", i+1, n, plain[i])
	case n == 0:
		return "in a commit with no durable call"
	case i == 0:
		return fmt.Sprintf("before the first durable call, %s", plain[0])
	case i >= n:
		return fmt.Sprintf("after the last durable call (%d of %d), %s", n, n, plain[n-1])
	}
	return fmt.Sprintf("between call %d of %d, %s, and call %d, %s", i, n, plain[i-1], i+1, plain[i])
}
