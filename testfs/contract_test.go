package testfs

// The contract suite: real Perl CGI workloads (testfs/perl/) run as
// concurrent processes through a safefs mount, each test asserting exact
// outcomes of the contract in /work/shared/design/BRIEF.md §2. Sleeps
// only let processes overlap; no assertion depends on timing.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	safefs "github.com/safefs/safefs/fs"
	"golang.org/x/sys/unix"
)

// Workload sizes. The naive counter and the appenders run the sizes of
// the issue (16 x 400, 32 x 500: ~95 s together with -race on two shared
// cores); the lock methods are sized to keep the rest of the suite short
// (the spinning locks retry every 2-10 ms and cost ~20 ms an increment).
const (
	naiveProcs, naiveRuns     = 16, 400 // 6400 naive requests, 16 at a time
	lockProcs, lockRuns       = 8, 50   // 400 increments per kernel-lock method
	spinRuns                  = 25      // 200 per spinning (mkdir, symlink...) lock method
	appendProcs, appendRuns   = 32, 500 // 16000 guestbook entries
	appendLines               = 4
	rewriteProcs, rewriteRuns = 8, 10 // 80 versions of 256 KiB
	readerProcs, readerMin    = 8, 5
)

// setup mounts safefs and makes a directory "data" in it owned by
// www-data, as a CGI data directory is. It returns the mount, www-data's
// credentials and the directory's path through the mount.
func setup(t *testing.T, edit ...func(*safefs.Options)) (*Mount, Cred, string) {
	t.Helper()
	www := LookupUser(t, "www-data")
	m := New(t, edit...)
	dir := m.Path("data")
	wwwDir(t, &www, dir)
	return m, www, dir
}

// doneField sums the integer field name=... of the DONE lines.
func doneField(outs []string, name string) int {
	re := regexp.MustCompile(`^DONE .*\b` + name + `=(\d+)`)
	sum := 0
	for _, out := range outs {
		for line := range strings.Lines(out) {
			if m := re.FindStringSubmatch(line); m != nil {
				n, _ := strconv.Atoi(m[1])
				sum += n
			}
		}
	}
	return sum
}

// readBoth reads name (relative to the mount) through the mount and in
// BACKING, and requires them equal.
func readBoth(t *testing.T, m *Mount, rel string) []byte {
	t.Helper()
	viaMount, err := os.ReadFile(m.Path(rel))
	require.NoError(t, err)
	inBacking, err := os.ReadFile(m.BackingPath(rel))
	require.NoError(t, err)
	require.True(t, bytes.Equal(viaMount, inBacking), "%s: mount shows %s, backing holds %s", rel, summary(viaMount), summary(inBacking))
	return viaMount
}

// summary describes file content briefly: length, md5, head.
func summary(b []byte) string {
	sum := md5.Sum(b)
	head, tail := b[:min(len(b), 24)], b[max(len(b)-24, 0):]
	return fmt.Sprintf("%d bytes md5 %s head %q tail %q", len(b), hex.EncodeToString(sum[:4]), head, tail)
}

// TestContractNaiveCounter: the unlocked counter of §1. Increments may be
// lost (read-modify-write race), but no request ever reads an empty file,
// a torn count, or 0 once the count was above 0 (contract 1, 2).
func TestContractNaiveCounter(t *testing.T) {
	t.Parallel() // heavy: see the package doc
	m, www, dir := setup(t)
	file := filepath.Join(dir, "count.txt")
	RunPerl(t, &www, "write.pl", file, ">", "0\n")

	ps := make([]Perl, naiveProcs)
	for i := range ps {
		ps[i] = Perl{Script: "naive_counter.pl", Args: []string{file, strconv.Itoa(naiveRuns)}, As: &www}
	}
	outs := runAll(t, ps)
	assertNoAnomalies(t, outs)
	require.Equal(t, naiveProcs*naiveRuns, doneField(outs, "reads"), "every request read the counter")

	n := counter(t, readBoth(t, m, "data/count.txt"))
	assert.GreaterOrEqual(t, n, 1)
	assert.LessOrEqual(t, n, naiveProcs*naiveRuns)
	t.Logf("naive counter: %d of %d increments kept", n, naiveProcs*naiveRuns)
}

// TestContractLockedCounters: counters under each home-made lock of the
// seeds lose no increment (contract 2, 3, 4, 10): the lock is released
// only after close returned, so close must return after the commit; the
// flock and fcntl variants read through a handle opened before the lock
// was granted, so it must read the latest committed version; flockfile
// rewrites its lock file (open >) under the lock, so the flock must hold
// across the lock file's own commits. 8 processes x 50 increments for the
// kernel locks, 8 x 25 for the spinning ones.
func TestContractLockedCounters(t *testing.T) {
	t.Parallel() // heavy: see the package doc
	m, www, _ := setup(t)
	methods := []struct {
		name string
		lock string // lock name in the method's directory
		left []string
		runs int // increments per process
	}{
		{"flock", "", nil, lockRuns},
		{"fcntl", "", nil, lockRuns},
		{"flockfile", "count.lock", []string{"count.lock"}, lockRuns},
		{"mkdir", "lock", nil, spinRuns},
		{"symlink", "lock", nil, spinRuns},
		{"link", "lock", nil, spinRuns},
		{"excl", "lock", nil, spinRuns},
		{"rename", "token", []string{"token"}, spinRuns},
		{"renamedata", "unused", nil, spinRuns},
	}
	for _, mt := range methods {
		t.Run(mt.name, func(t *testing.T) {
			rel := "data/" + mt.name
			dir := m.Path(rel)
			wwwDir(t, &www, dir)
			file := filepath.Join(dir, "count.txt")
			RunPerl(t, &www, "write.pl", file, ">", "0\n")
			if mt.name == "rename" {
				RunPerl(t, &www, "write.pl", filepath.Join(dir, mt.lock), ">", "token\n")
			}
			ps := make([]Perl, lockProcs)
			for i := range ps {
				ps[i] = Perl{Script: "lock_counter.pl", As: &www,
					Args: []string{mt.name, file, strconv.Itoa(mt.runs), filepath.Join(dir, mt.lock)}}
			}
			outs := runAll(t, ps)
			assertNoAnomalies(t, outs)
			assert.Equal(t, lockProcs*mt.runs, counter(t, readBoth(t, m, rel+"/count.txt")), "increments kept")

			// The locks were all released: only the data file (and a
			// lock file or token meant to stay) is left.
			want := append([]string{"count.txt"}, mt.left...)
			sort.Strings(want)
			for _, d := range []string{dir, m.BackingPath(rel)} {
				ents, err := os.ReadDir(d)
				require.NoError(t, err)
				var got []string
				for _, e := range ents {
					got = append(got, e.Name())
				}
				assert.Equal(t, want, got, "entries left in %s", d)
			}
		})
	}
}

var entryLine = regexp.MustCompile(`^w=(\d+) s=(\d+) l=(\d+)/(\d+) -{24}$`)

// TestContractAppenders: 32 guestbook writers append multi-line entries,
// each line its own write(2) (contract 6): every entry is in the file
// exactly once, its lines together and in order, and each writer's
// entries in the order it wrote them (each close committed before the
// next open).
func TestContractAppenders(t *testing.T) {
	t.Parallel() // heavy: see the package doc
	m, www, dir := setup(t)
	file := filepath.Join(dir, "guestbook.txt")
	RunPerl(t, &www, "write.pl", file, ">", "")

	ps := make([]Perl, appendProcs)
	for i := range ps {
		ps[i] = Perl{Script: "appender.pl", As: &www,
			Args: []string{file, strconv.Itoa(i), strconv.Itoa(appendRuns), strconv.Itoa(appendLines)}}
	}
	outs := runAll(t, ps)
	assertNoAnomalies(t, outs)

	data := readBoth(t, m, "data/guestbook.txt")
	problems := checkLog(data, appendProcs, appendRuns, appendLines)
	assert.Empty(t, problems, "the guestbook (%d bytes)", len(data))
}

// checkLog checks a guestbook written by appender.pl: procs writers, each
// runs entries of lines lines. It returns the first problems found: a
// line out of place, an entry missing, repeated, or out of its writer's
// order.
func checkLog(data []byte, procs, runs, nlines int) []string {
	var problems []string
	bad := func(format string, args ...any) {
		if len(problems) < 20 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	lines := strings.Split(string(data), "\n")
	if lines[len(lines)-1] != "" {
		bad("the log does not end with a newline")
	}
	lines = lines[:len(lines)-1]
	if len(lines) != procs*runs*nlines {
		bad("%d lines in the log, want %d", len(lines), procs*runs*nlines)
	}
	seen := map[[2]int]int{}
	lastSeq := map[int]int{}
	for i := 0; i < len(lines); {
		mm := entryLine.FindStringSubmatch(lines[i])
		if mm == nil || mm[3] != "1" {
			bad("line %d: %q does not start an entry", i+1, lines[i])
			i++
			continue
		}
		w, _ := strconv.Atoi(mm[1])
		s, _ := strconv.Atoi(mm[2])
		start := i
		i++
		for k := 2; k <= nlines; k++ {
			want := fmt.Sprintf("w=%d s=%d l=%d/%d ", w, s, k, nlines)
			if i >= len(lines) || !strings.HasPrefix(lines[i], want) {
				bad("entry w=%d s=%d at line %d: its line %d is %q, want %q...", w, s, start+1, k, lines[min(i, len(lines)-1)], want)
				break
			}
			i++
		}
		seen[[2]int{w, s}]++
		if s <= lastSeq[w] {
			bad("entry w=%d s=%d at line %d comes after s=%d", w, s, start+1, lastSeq[w])
		}
		lastSeq[w] = s
	}
	for w := range procs {
		for s := 1; s <= runs; s++ {
			if c := seen[[2]int{w, s}]; c != 1 {
				bad("entry w=%d s=%d is in the log %d times", w, s, c)
			}
		}
	}
	return problems
}

// TestContractRewriteWhileReading: 8 writers rewrite a 256 KiB file in
// 4 KiB writes while 8 readers read it whole again and again: no read
// sees an empty, short, torn (two writers or versions) or corrupt file
// (contract 1, 5).
func TestContractRewriteWhileReading(t *testing.T) {
	m, www, _ := setup(t)
	rewriteWhileReading(t, m, &www, 64)
}

// rewriteWhileReading runs the rewriters and readers of data/board.dat,
// whose versions are chunks x 4 KiB.
func rewriteWhileReading(t *testing.T, m *Mount, www *Cred, chunks int) {
	file := m.Path("data/board.dat")
	n := strconv.Itoa(chunks)
	RunPerl(t, www, "rewriter.pl", file, "0", "1", n)
	stop := filepath.Join(filepath.Dir(m.Backing), "stop-readers")

	var readers []Perl
	for range readerProcs {
		readers = append(readers, Perl{Script: "reader.pl", As: www,
			Args: []string{file, stop, strconv.Itoa(readerMin), n}})
	}
	var rOuts []string
	var wg sync.WaitGroup
	wg.Go(func() { rOuts = runAll(t, readers) })

	var writers []Perl
	for i := range rewriteProcs {
		writers = append(writers, Perl{Script: "rewriter.pl", As: www,
			Args: []string{file, strconv.Itoa(i + 1), strconv.Itoa(rewriteRuns), n}})
	}
	wOuts := runAll(t, writers)
	require.NoError(t, os.WriteFile(stop, nil, 0o644))
	wg.Wait()

	assertNoAnomalies(t, wOuts)
	assertNoAnomalies(t, rOuts)
	t.Logf("%d whole-file reads during %d rewrites", doneField(rOuts, "reads"), rewriteProcs*rewriteRuns)
	assert.GreaterOrEqual(t, doneField(rOuts, "reads"), readerProcs*readerMin)

	// The file at rest is one whole version too, the same in BACKING.
	readBoth(t, m, "data/board.dat")
	out := RunPerl(t, www, "reader.pl", file, stop, "1", n)
	assertNoAnomalies(t, []string{out})
}

// proc is a running script driven line by line over stdin and stdout.
type proc struct {
	cmd    *exec.Cmd
	cancel context.CancelFunc
	in     io.WriteCloser
	out    *bufio.Reader
	errb   bytes.Buffer
}

func start(t *testing.T, p Perl) *proc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	pr := &proc{cancel: cancel}
	pr.cmd = p.Command(ctx)
	var err error
	pr.in, err = pr.cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := pr.cmd.StdoutPipe()
	require.NoError(t, err)
	pr.out = bufio.NewReader(stdout)
	pr.cmd.Stderr = &pr.errb
	require.NoError(t, pr.cmd.Start())
	t.Cleanup(func() {
		cancel()
		_ = pr.cmd.Wait()
	})
	return pr
}

// expect reads the script's next line and requires it to be want.
func (p *proc) expect(t *testing.T, want string) {
	t.Helper()
	line, err := p.out.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != want {
		p.cancel()
		_ = p.cmd.Wait()
		t.Fatalf("script said %q (err %v), want %q; stderr:\n%s", line, err, want, p.errb.String())
	}
}

// finish sends a line, reads the rest of stdout and waits for the exit.
func (p *proc) finish(t *testing.T) string {
	t.Helper()
	_, _ = io.WriteString(p.in, "go\n")
	rest, _ := io.ReadAll(p.out)
	err := p.cmd.Wait()
	require.NoError(t, err, "stdout %q stderr %q", rest, p.errb.String())
	return string(rest)
}

// TestContractKilledWriter: a writer killed by a signal half way through
// leaves the previous version byte-identical (contract 7); one that exits
// normally without closing commits what it wrote (contract 2).
func TestContractKilledWriter(t *testing.T) {
	m, www, _ := setup(t)
	old := bytes.Repeat([]byte("old version, whole\n"), 10000) // 190 KB
	half := bytes.Repeat([]byte("N"), 128*1024)
	cases := []struct {
		name, open, end string
		sig             syscall.Signal
		want            []byte
	}{
		{"SIGKILL", ">", "wait", syscall.SIGKILL, old},
		{"SIGTERM", ">", "wait", syscall.SIGTERM, old},
		{"SIGKILL-append", ">>", "wait", syscall.SIGKILL, old},
		{"exit-without-close", ">", "exit", 0, half},
		{"_exit-without-close", ">", "_exit", 0, half},
		{"_exit-without-close-append", ">>", "_exit", 0, append(append([]byte{}, old...), half...)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rel := "data/" + c.name + ".dat"
			file := m.Path(rel)
			writeVia(t, www, file, old)
			p := start(t, Perl{Script: "half_writer.pl", As: &www, Args: []string{file, c.open, c.end}})
			p.expect(t, "HALF")
			if c.end == "wait" {
				// Half written, not closed: others still see the old version.
				mid := readBoth(t, m, rel)
				assert.True(t, bytes.Equal(old, mid), "while the writer is half way: got %s, want the old version", summary(mid))
			}
			if c.sig != 0 {
				require.NoError(t, p.cmd.Process.Signal(c.sig))
				err := p.cmd.Wait()
				var ee *exec.ExitError
				require.ErrorAs(t, err, &ee)
				ws := ee.Sys().(syscall.WaitStatus)
				require.True(t, ws.Signaled() && ws.Signal() == c.sig, "writer ended by %v", err)
			} else {
				require.NoError(t, p.cmd.Wait(), p.errb.String())
			}
			got := readBoth(t, m, rel)
			assert.True(t, bytes.Equal(c.want, got), "after the writer ended: got %s, want %s", summary(got), summary(c.want))
		})
	}
}

// TestContractSharedDescriptor: a rewrite whose descriptor is shared with
// a forked child, a child run by system() (which closes it at exec), or a
// dup. A child's close does not commit while the opener still holds the
// descriptor: the file stays the old version until the parent's close. A
// dup's close in the opener commits the handle's content at that close
// (brief §3: there is no "last close" signal): the first half, never old
// bytes mixed with new ones. A child killed by a signal
// must not commit, and must not throw away the parent's pending bytes:
// after the parent's close the file is the parent's whole new content.
// Observed on this safefs: the killed child's close (Flush, kill check)
// discards the handle's pending version, the parent's first half with
// it; the parent's next write copies the old version again, so its close
// commits the old first half with the new second half: a mixed file.
func TestContractSharedDescriptor(t *testing.T) {
	m, www, _ := setup(t)
	old := bytes.Repeat([]byte("O"), 256*1024)
	first := bytes.Repeat([]byte("A"), 128*1024)
	whole := append(append([]byte{}, first...), bytes.Repeat([]byte("B"), 128*1024)...)
	for _, how := range []string{"fork", "system", "dup", "forkkill"} {
		t.Run(how, func(t *testing.T) {
			rel := "data/" + how + ".dat"
			file := m.Path(rel)
			writeVia(t, www, file, old)
			p := start(t, Perl{Script: "fork_writer.pl", As: &www, Args: []string{file, how}})
			p.expect(t, "SHARED")
			mid := readBoth(t, m, rel)
			switch {
			case bytes.Equal(mid, old):
				assert.Equal(t, "forkkill" == how || "fork" == how || "system" == how, true,
					"%s: the dup's close in the opener left the old version", how)
			case bytes.Equal(mid, first):
				assert.Equal(t, "dup", how, "%s: a child's close published the parent's half-written version", how)
			default:
				t.Errorf("%s: after the shared copy closed, the file is %s: neither the old version nor the handle's content", how, summary(mid))
			}
			assert.Equal(t, "CLOSED\n", p.finish(t))
			got := readBoth(t, m, rel)
			assert.True(t, bytes.Equal(whole, got), "after the parent's close: got %s, want %s", summary(got), summary(whole))
		})
	}
}

// TestContractMetadata: owner, group, mode and xattrs survive a commit,
// set-uid is dropped when a non-root user writes, hard links stay one
// file, and a commit neither brings back an unlinked name nor misses a
// rename (contract 11).
func TestContractMetadata(t *testing.T) {
	m, www, dir := setup(t)

	t.Run("owner-mode-xattr", func(t *testing.T) {
		rel := "data/owned.txt"
		file := m.Path(rel)
		RunPerl(t, &www, "write.pl", file, ">", "by www-data\n")
		require.NoError(t, unix.Chmod(file, 0o640))
		if err := unix.Setxattr(file, "user.origin", []byte("guestbook"), 0); err != nil {
			t.Fatalf("setxattr through the mount: %v", err)
		}
		RunPerl(t, nil, "write.pl", file, ">", "rewritten by root\n")
		assert.Equal(t, "rewritten by root\n", string(readBoth(t, m, rel)))
		for _, p := range []string{file, m.BackingPath(rel)} {
			st := lstat(t, p)
			assert.Equal(t, www.Uid, st.Uid, "owner of %s", p)
			assert.Equal(t, www.Gid, st.Gid, "group of %s", p)
			assert.Equal(t, uint32(0o640), st.Mode&0o7777, "mode of %s", p)
			assert.Equal(t, "guestbook", xattr(t, p, "user.origin"), "xattr of %s", p)
		}
	})

	t.Run("setuid-dropped", func(t *testing.T) {
		for _, c := range []struct {
			who  string
			as   *Cred
			mode uint32
		}{{"www-data", &www, 0o755}, {"root", nil, 0o4755}} {
			rel := "data/suid-" + c.who
			file := m.Path(rel)
			RunPerl(t, &www, "write.pl", file, ">", "#!/bin/sh\n")
			require.NoError(t, unix.Chmod(file, 0o4755))
			require.Equal(t, uint32(0o4755), lstat(t, file).Mode&0o7777)
			RunPerl(t, c.as, "write.pl", file, ">", "#!/bin/sh\necho new\n")
			assert.Equal(t, "#!/bin/sh\necho new\n", string(readBoth(t, m, rel)))
			for _, p := range []string{file, m.BackingPath(rel)} {
				st := lstat(t, p)
				assert.Equal(t, c.mode, st.Mode&0o7777, "mode of %s after %s wrote", p, c.who)
				assert.Equal(t, www.Uid, st.Uid, "owner of %s", p)
			}
		}
	})

	t.Run("hard-link", func(t *testing.T) {
		RunPerl(t, &www, "write.pl", m.Path("data/a"), ">", "one\n")
		require.NoError(t, os.Link(m.Path("data/a"), m.Path("data/b")))
		RunPerl(t, &www, "write.pl", m.Path("data/a"), ">", "two, longer\n")
		RunPerl(t, &www, "write.pl", m.Path("data/b"), ">>", "three\n")
		for _, rel := range []string{"data/a", "data/b"} {
			assert.Equal(t, "two, longer\nthree\n", string(readBoth(t, m, rel)), rel)
		}
		for _, pair := range [][2]string{{m.Path("data/a"), m.Path("data/b")}, {m.BackingPath("data/a"), m.BackingPath("data/b")}} {
			sa, sb := lstat(t, pair[0]), lstat(t, pair[1])
			assert.Equal(t, sa.Ino, sb.Ino, "one inode: %s and %s", pair[0], pair[1])
			assert.Equal(t, uint64(2), uint64(sa.Nlink), "nlink of %s", pair[0])
			assert.Equal(t, uint64(2), uint64(sb.Nlink), "nlink of %s", pair[1])
		}
	})

	t.Run("unlink-while-open", func(t *testing.T) {
		rel := "data/gone.txt"
		file := m.Path(rel)
		RunPerl(t, &www, "write.pl", file, ">", "old\n")
		p := start(t, Perl{Script: "hold_writer.pl", As: &www, Args: []string{file, "new ", "content\n"}})
		p.expect(t, "READY")
		require.NoError(t, os.Remove(file))
		assert.Equal(t, "CLOSED\n", p.finish(t))
		for _, path := range []string{file, m.BackingPath(rel)} {
			_, err := os.Lstat(path)
			assert.True(t, errors.Is(err, fs.ErrNotExist), "%s after the commit: %v", path, err)
		}
		ents, err := os.ReadDir(dir)
		require.NoError(t, err)
		for _, e := range ents {
			assert.NotEqual(t, "gone.txt", e.Name())
		}
	})

	t.Run("rename-while-open", func(t *testing.T) {
		from, to := "data/before.txt", "data/after.txt"
		RunPerl(t, &www, "write.pl", m.Path(from), ">", "old\n")
		p := start(t, Perl{Script: "hold_writer.pl", As: &www, Args: []string{m.Path(from), "new ", "content\n"}})
		p.expect(t, "READY")
		require.NoError(t, os.Rename(m.Path(from), m.Path(to)))
		assert.Equal(t, "old\n", string(readBoth(t, m, to)), "renamed, not yet committed")
		assert.Equal(t, "CLOSED\n", p.finish(t))
		assert.Equal(t, "new content\n", string(readBoth(t, m, to)))
		for _, path := range []string{m.Path(from), m.BackingPath(from)} {
			_, err := os.Lstat(path)
			assert.True(t, errors.Is(err, fs.ErrNotExist), "%s after the commit: %v", path, err)
		}
	})
}

// TestContractReadOwnWrites: a handle reads its own uncommitted writes,
// rewritten in place or appended (contract 4), and its close commits them.
func TestContractReadOwnWrites(t *testing.T) {
	m, www, _ := setup(t)
	for _, c := range []struct{ name, open, old, text, want string }{
		{"rewrite", "+<", "old content\n", "NEW", "NEW content\n"},
		{"append", "+>>", "line 1\n", "line 2\n", "line 1\nline 2\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rel := "data/own-" + c.name
			writeVia(t, www, m.Path(rel), []byte(c.old))
			out := RunPerl(t, &www, "read_own.pl", m.Path(rel), c.open, c.text)
			got, err := hex.DecodeString(strings.TrimSpace(strings.TrimPrefix(out, "READ ")))
			require.NoError(t, err, out)
			assert.Equal(t, c.want, string(got), "read through the writing handle before close")
			assert.Equal(t, c.want, string(readBoth(t, m, rel)), "committed at close")
		})
	}
}

// TestContractSnapshotRead: a reader that opened version N reads N whole
// through the same descriptor after N+1 was committed (contract 5).
func TestContractSnapshotRead(t *testing.T) {
	m, www, dir := setup(t)
	file := filepath.Join(dir, "board.dat")
	RunPerl(t, &www, "rewriter.pl", file, "1", "1")
	v1 := readBoth(t, m, "data/board.dat")

	p := start(t, Perl{Script: "snapshot_reader.pl", As: &www, Args: []string{file}})
	p.expect(t, "OPENED")
	RunPerl(t, &www, "rewriter.pl", file, "2", "1")
	v2 := readBoth(t, m, "data/board.dat")
	require.False(t, bytes.Equal(v1, v2), "the writer committed a new version")

	sum := md5.Sum(v1)
	want := fmt.Sprintf("LEN %d MD5 %s\n", len(v1), hex.EncodeToString(sum[:]))
	assert.Equal(t, want, p.finish(t), "the reader read version 1 whole")
}

// writeVia writes data to file through the mount as c, with write.pl.
func writeVia(t *testing.T, c Cred, file string, data []byte) {
	t.Helper()
	_, err := Perl{Script: "write.pl", Args: []string{file, ">", "-"}, As: &c, Stdin: string(data)}.Run()
	require.NoError(t, err)
}

func lstat(t *testing.T, path string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Lstat(path, &st), path)
	return st
}

func xattr(t *testing.T, path, name string) string {
	t.Helper()
	buf := make([]byte, 256)
	n, err := unix.Getxattr(path, name, buf)
	if err != nil {
		t.Errorf("getxattr %s %s: %v", path, name, err)
		return ""
	}
	return string(buf[:n])
}

// TestContractShellRedirect: a shell script's `cmd > file` opens the file
// with O_TRUNC, moves the descriptor to stdout and closes the original
// before cmd even runs; in `{ a; b; } > file` child a may exit, closing
// its copy, before b writes. Neither close may publish an empty file:
// readers see the old value or the new one, never nothing (contract 1).
func TestContractShellRedirect(t *testing.T) {
	m, www, dir := setup(t)
	file := filepath.Join(dir, "status.txt")
	RunPerl(t, &www, "write.pl", file, ">", "value 0\n")
	const runs = 100
	// Odd runs: `cmd > file`. Even runs: a group's redirect, where the
	// shell holds the file and a child that inherits it writes nothing.
	script := `for i in $(seq 1 ` + strconv.Itoa(runs) + `); do
	  if [ $((i % 2)) = 1 ]; then /usr/bin/printf 'value %s\n' "$i" > "$1"
	  else { /bin/true; /usr/bin/printf 'value %s\n' "$i"; } > "$1"; fi
	done`
	writer := AsUser(exec.Command("sh", "-c", script, "sh", file), www)
	var empty, reads int
	done := make(chan error, 1)
	require.NoError(t, writer.Start())
	go func() { done <- writer.Wait() }()
	for {
		select {
		case err := <-done:
			require.NoError(t, err)
			t.Logf("%d reads while the shell rewrote the file %d times", reads, runs)
			assert.Zero(t, empty, "reads that found the file empty")
			assert.Equal(t, fmt.Sprintf("value %d\n", runs), string(readBoth(t, m, "data/status.txt")))
			// `: > file` empties it, by the time the shell goes on.
			out, err := AsUser(exec.Command("sh", "-c", `: > "$1"; wc -c < "$1"`, "sh", file), www).CombinedOutput()
			require.NoError(t, err, "%s", out)
			assert.Equal(t, "0", strings.TrimSpace(string(out)), "size seen by the shell right after : >")
			return
		default:
		}
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		reads++
		if len(b) == 0 {
			empty++
		}
	}
}

// TestContractDBMCounter: hit counters in DBM files (SDBM_File, whose
// database is two files, and DB_File), updated under the script's own
// flock by 8 processes: the count is exact and every process's own key
// holds its own count. (GDBM_File and NDBM_File, dbmopen's default on
// Debian, map the file shared: see the docs/threat-model.md, limitations.)
func TestContractDBMCounter(t *testing.T) {
	const procs, runs = 8, 25
	m, www, dir := setup(t)
	for _, module := range []string{"SDBM_File", "DB_File"} {
		t.Run(module, func(t *testing.T) {
			file := filepath.Join(dir, "hits_"+module)
			ps := make([]Perl, procs)
			for i := range ps {
				ps[i] = Perl{Script: "dbm_counter.pl", As: &www, Args: []string{module, file, strconv.Itoa(runs)}}
			}
			assertNoAnomalies(t, runAll(t, ps))
			hits, own := "", 0
			for line := range strings.Lines(RunPerl(t, &www, "dbm_dump.pl", module, file)) {
				k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
				switch {
				case k == "hits":
					hits = v
				case strings.HasPrefix(k, "p") && v == strconv.Itoa(runs):
					own++
				}
			}
			assert.Equal(t, strconv.Itoa(procs*runs), hits, "the counter lost or doubled increments")
			assert.Equal(t, procs, own, "processes whose own key holds their count")
			NoPendingStaging(t, m)
		})
	}
}
