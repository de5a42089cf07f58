package fs_test

// Shared maps through the mount. Every map is made and
// touched in a helper process (this test binary run again, see
// TestMmapHelper), never in the test process, which serves the mount: a
// page fault there on the mount's file could wait for the server while
// the Go runtime stops the world for GC, and never end (it did).

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/testfs"
)

const mmHelperEnv = "SAFEFS_MMAP_HELPER"

// TestMmapHelper is not a test: run by mmChild with mmHelperEnv set, it
// does one operation on a file and exits.
func TestMmapHelper(t *testing.T) {
	if os.Getenv(mmHelperEnv) == "" {
		return
	}
	args := flag.Args()
	if err := mmHelper(args[0], args[1], args[2:]...); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// mmHelper: "read" prints the file (read(2)), "map" prints it through a
// fresh read-only shared map, "write" replaces it with standard input
// (open O_TRUNC, write, close), "session" runs commands (mmSession),
// "fsync" opens it read-write, fsyncs
// and closes (writing nothing), "statloop" and "seekend" are
// kernelsize_test.go's, "readloop" reads it both ways until
// standard input closes and prints "reads=N bad=M" (bad: a read that is
// not one whole version; versions are one byte repeated, of the size given).
func mmHelper(op, path string, args ...string) error {
	switch op {
	case "read":
		b, err := os.ReadFile(path)
		if err == nil {
			_, err = os.Stdout.Write(b)
		}
		return err
	case "map":
		b, err := mmMapRead(path)
		if err == nil {
			_, err = os.Stdout.Write(b)
		}
		return err
	case "write":
		b, err := io.ReadAll(os.Stdin)
		if err == nil {
			err = os.WriteFile(path, b, 0o644)
		}
		return err
	case "rewrite": // as `open +<`, truncate, print, close: no O_TRUNC
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			return err
		}
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		err = f.Truncate(int64(len(b)))
		if err == nil {
			_, err = f.WriteAt(b, 0)
		}
		return errors.Join(err, f.Close())
	case "fsync":
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		err = f.Sync()
		return errors.Join(err, f.Close())
	case "session":
		return mmSession(path)
	case "statloop":
		return statLoop(path)
	case "seekend", "seekshrink":
		return seekEndLoop(path, seekEndRounds, op == "seekshrink")
	case "readloop":
		size, err := strconv.Atoi(args[0])
		if err != nil {
			return err
		}
		return mmReadLoop(path, size, len(args) > 1 && args[1] == "maps")
	}
	return fmt.Errorf("unknown helper op %q", op)
}

// mmReadLoop reads with read(), and with fresh maps in turn if maps.
func mmReadLoop(path string, size int, maps bool) error {
	stop := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(stop) }()
	reads, bad, first := 0, 0, ""
	for i := 0; ; i++ {
		select {
		case <-stop:
			fmt.Printf("reads=%d bad=%d %s\n", reads, bad, first)
			return nil
		default:
		}
		read, how := os.ReadFile, "read"
		if maps && i%2 == 1 {
			read, how = mmMapRead, "map"
		}
		b, err := read(path)
		reads++
		if err != nil || len(b) != size || len(b) == 0 || len(bytes.Trim(b, string(b[:1]))) != 0 {
			if bad++; bad == 1 {
				first = fmt.Sprintf("first bad (%s): %s %v", how, mmSummary(b), err)
			}
		}
	}
}

// mmMapRead opens path and returns a copy of it read through a shared
// read-only map of its whole size.
func mmMapRead(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return nil, err
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap MAP_SHARED %s: %w", path, err)
	}
	defer unix.Munmap(m)
	return mmCopy(m)
}

// mmCopy copies a map; a fault (SIGBUS past the file's end) is an error,
// not a crash of the test binary.
func mmCopy(m []byte) (b []byte, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("fault reading the map: %v", r)
		}
	}()
	return bytes.Clone(m), nil
}

// mmFill copies v into a map; a fault is an error, as in mmCopy.
func mmFill(m, v []byte) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("fault writing the map: %v", r)
		}
	}()
	copy(m, v)
	return nil
}

// mmChild runs the helper op on path in another process and returns
// what it printed.
func mmChild(t *testing.T, op, path string, stdin []byte) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang only
	defer cancel()
	cmd := mmCommand(ctx, op, path)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "helper %s %s: %s", op, path, stderr.String())
	return out
}

func mmCommand(ctx context.Context, op, path string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"-test.run=^TestMmapHelper$", "--", op, path}, args...)...)
	cmd.Env = append(os.Environ(), mmHelperEnv+"=1")
	return cmd
}

// mmVersion is one version of a file: fill repeated n times.
func mmVersion(fill byte, n int) []byte { return bytes.Repeat([]byte{fill}, n) }

func mmSummary(b []byte) string {
	if len(b) == 0 {
		return "0 bytes"
	}
	trimmed := bytes.TrimLeft(b, string(b[:1]))
	return fmt.Sprintf("%d bytes, %d of %q then %q", len(b), len(b)-len(trimmed), b[0], trimmed[:min(len(trimmed), 16)])
}

// mmEqual fails unless got is want, byte for byte.
func mmEqual(t *testing.T, want, got []byte, what string) {
	t.Helper()
	if !bytes.Equal(want, got) {
		t.Errorf("%s: got %s, want %s", what, mmSummary(got), mmSummary(want))
	}
}

// mmSession runs one command a line from standard input on one
// descriptor and map of path, and answers each with a line: "ok", "ok "
// and what it shows, or "err " and why.
//
//	open ro|rw, map ro|rw|private N, fill BYTE, touch, show, read,
//	ftruncate N, msync, fsync, munmap, close
func mmSession(path string) error {
	var f *os.File
	var mp []byte
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var word, arg string
		fmt.Sscan(in.Text(), &word, &arg)
		n, _ := strconv.Atoi(arg)
		var show string
		var err error
		switch word {
		case "open":
			f, err = os.OpenFile(path, map[string]int{"ro": os.O_RDONLY, "rw": os.O_RDWR}[arg], 0)
		case "map", "mapro", "mapprivate":
			prot, flags := unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED
			if word == "mapro" {
				prot = unix.PROT_READ
			} else if word == "mapprivate" {
				flags = unix.MAP_PRIVATE
			}
			mp, err = unix.Mmap(int(f.Fd()), 0, n, prot, flags)
		case "fill":
			err = mmFill(mp, mmVersion(arg[0], len(mp)))
		case "touch":
			_, err = mmCopy(mp[:1])
		case "show":
			var b []byte
			b, err = mmCopy(mp)
			show = mmSummary(b)
		case "read":
			b := make([]byte, 1<<20)
			n, err = f.ReadAt(b, 0)
			if errors.Is(err, io.EOF) {
				err = nil
			}
			show = mmSummary(b[:n])
		case "ftruncate":
			err = f.Truncate(int64(n))
		case "msync":
			err = unix.Msync(mp, unix.MS_SYNC)
		case "fsync":
			err = f.Sync()
		case "munmap":
			err = unix.Munmap(mp)
		case "close":
			err = f.Close()
		default:
			err = fmt.Errorf("unknown command %q", in.Text())
		}
		if err != nil {
			fmt.Printf("err %s: %v\n", in.Text(), err)
		} else {
			fmt.Println(strings.TrimSpace("ok " + show))
		}
	}
	return in.Err()
}

// mmProc is a helper process running a session.
type mmProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

func mmStartSession(t *testing.T, path string) *mmProc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a hang only
	return startProc(t, mmCommand(ctx, "session", path), cancel)
}

// startProc starts cmd with its stdin and stdout piped to the test; the
// cleanup closes its stdin, waits for it and cancels its context.
func startProc(t *testing.T, cmd *exec.Cmd, cancel context.CancelFunc) *mmProc {
	t.Helper()
	p := &mmProc{cmd: cmd}
	p.cmd.Stderr = os.Stderr
	var err error
	p.stdin, err = p.cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := p.cmd.StdoutPipe()
	require.NoError(t, err)
	p.out = bufio.NewReader(stdout)
	require.NoError(t, p.cmd.Start())
	t.Cleanup(func() {
		p.stdin.Close()
		_ = p.cmd.Wait()
		cancel()
	})
	return p
}

// do runs commands in the session; an "err" answer fails the test. It
// returns what the last one showed.
func (p *mmProc) do(t *testing.T, cmds ...string) string {
	t.Helper()
	var show string
	for _, c := range cmds {
		_, err := fmt.Fprintln(p.stdin, c)
		require.NoError(t, err, c)
		line, err := p.out.ReadString('\n')
		require.NoError(t, err, "%s: the helper ended", c)
		line = strings.TrimSpace(line)
		require.True(t, strings.HasPrefix(line, "ok"), "helper: %s", line)
		show = strings.TrimSpace(strings.TrimPrefix(line, "ok"))
	}
	return show
}

// mmShows fails unless shown (a helper's summary) is want's summary.
func mmShows(t *testing.T, want []byte, shown, what string) {
	t.Helper()
	if shown != mmSummary(want) {
		t.Errorf("%s: got %s, want %s", what, shown, mmSummary(want))
	}
}

func mmRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// mmSetup mounts safefs and writes v1 to f in it.
func mmSetup(t *testing.T, v1 []byte) (*testfs.Mount, string) {
	t.Helper()
	m := testfs.New(t)
	require.NoError(t, os.WriteFile(m.Path("f"), v1, 0o644))
	return m, m.Path("f")
}

var mmPage = os.Getpagesize()

// TestMmapReaderKeepsVersion: a reader's shared read-only map shows the
// version it mapped, whole (the page it had touched and those it had
// not), after another process commits a shorter, different version and
// a third stats it; its read() too. A new open and map shows the new
// version. The commit is a rewrite without O_TRUNC (`open +<`,
// truncate, print): an O_TRUNC open cuts the kernel's one size of the
// inode to 0 before safefs hears of it, and the map faults (SIGBUS)
// until the next stat (see docs/threat-model.md, limitations: shared maps).
func TestMmapReaderKeepsVersion(t *testing.T) {
	v1, v2 := mmVersion('a', 3*mmPage+100), mmVersion('b', mmPage+7)
	_, path := mmSetup(t, v1)
	r := mmStartSession(t, path)
	r.do(t, "open ro", fmt.Sprint("mapro ", len(v1)), "touch")
	mmChild(t, "rewrite", path, v2)
	mmEqual(t, v2, mmRead(t, path), "another process's read of the new version")
	mmShows(t, v1, r.do(t, "show"), "the reader's map after another process's commit")
	mmShows(t, v1, r.do(t, "read"), "the reader's read() after the commit")
	// While the longer map is open, the kernel keeps its size (one per
	// inode: a smaller one would cut the map), but a stat shows the
	// caller's own and a new map is the new version.
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.EqualValues(t, len(v2), st.Size(), "another process's stat while the longer map is open")
	mmEqual(t, v2, mmChild(t, "map", path, nil), "a new open and map while the longer map is open")
	r.do(t, "munmap", "close")
	mmEqual(t, v2, mmChild(t, "map", path, nil), "a new open and map")
}

// TestMmapWriterCommitsAtClose: changes made through a writer's shared
// map are not seen by other processes (read or a fresh map) before the
// writer closes, and are seen whole, and in BACKING, after munmap+close.
func TestMmapWriterCommitsAtClose(t *testing.T) {
	v1, v2 := mmVersion('a', 2*mmPage+10), mmVersion('b', 2*mmPage+10)
	m, path := mmSetup(t, v1)
	w := mmStartSession(t, path)
	w.do(t, "open rw", fmt.Sprint("map ", len(v1)), "fill b")
	mmEqual(t, v1, mmRead(t, path), "another process's read before the writer's close")
	mmEqual(t, v1, mmChild(t, "map", path, nil), "another process's map before the writer's close")
	w.do(t, "munmap", "close")
	mmEqual(t, v2, mmRead(t, path), "another process's read after the writer's close")
	mmEqual(t, v2, mmChild(t, "map", path, nil), "another process's map after the writer's close")
	mmEqual(t, v2, mmRead(t, m.BackingPath("f")), "the file in BACKING")
}

// TestMmapDirtyPagesStayWithMapper: the kernel may write a map's dirty
// pages back through any writable handle of the file. Another process's
// handle that writes nothing, and fsyncs and closes while the map is
// dirty, must not commit the mapper's bytes: they wait for its close.
func TestMmapDirtyPagesStayWithMapper(t *testing.T) {
	v1, v2 := mmVersion('a', 2*mmPage), mmVersion('b', 2*mmPage)
	_, path := mmSetup(t, v1)
	w := mmStartSession(t, path)
	w.do(t, "open rw", fmt.Sprint("map ", len(v1)), "fill b")
	mmChild(t, "fsync", path, nil)
	mmEqual(t, v1, mmRead(t, path), "after another process's fsync and close, the mapper still open")
	w.do(t, "munmap", "close")
	mmEqual(t, v2, mmRead(t, path), "after the mapper's close")
}

// TestMmapNoPendingBytes: bytes written (write(2)) and not yet committed
// by another process show neither in a shared map opened before the
// write nor in a new map.
func TestMmapNoPendingBytes(t *testing.T) {
	v1, v2 := mmVersion('a', mmPage+9), mmVersion('b', 2*mmPage+9)
	_, path := mmSetup(t, v1)
	r := mmStartSession(t, path)
	r.do(t, "open ro", fmt.Sprint("mapro ", len(v1)), "touch")
	w, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer w.Close()
	_, err = w.WriteAt(v2, 0)
	require.NoError(t, err)
	mmShows(t, v1, r.do(t, "show"), "a map opened before another process's pending write")
	mmEqual(t, v1, mmChild(t, "map", path, nil), "a new map during another process's pending write")
	require.NoError(t, w.Close())
	mmEqual(t, v2, mmChild(t, "map", path, nil), "a new map after the commit")
}

// TestMmapWriterAtomicToReaders: two processes read the file in a loop
// with read() while a writer commits version after version through a
// shared map: no read is a mix or a part of versions. (Fresh maps made
// while the writer's map is open may share its pages: see docs/threat-model.md,
// limitations: shared maps.)
func TestMmapWriterAtomicToReaders(t *testing.T) {
	const rounds = 30
	size := 4*mmPage + 123
	_, path := mmSetup(t, mmVersion('A', size))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a hang only
	defer cancel()
	readers := make([]*mmLoop, 2)
	for i := range readers {
		readers[i] = mmStartLoop(t, ctx, path, size)
	}
	w := mmStartSession(t, path)
	for r := range rounds {
		w.do(t, "open rw", fmt.Sprint("map ", size), fmt.Sprintf("fill %c", 'a'+r%26), "munmap", "close")
	}
	for i, l := range readers {
		out := l.stop(t)
		t.Logf("reader %d: %s", i, out)
		require.Contains(t, out, " bad=0 ", "reader %d saw a mix", i)
		require.NotContains(t, out, "reads=0 ", "reader %d read nothing", i)
	}
	mmEqual(t, mmVersion(byte('a'+(rounds-1)%26), size), mmRead(t, path), "after the last commit")
}

// TestMapWhileTruncatingWriter: a reader that maps the file (and reads
// it) while another process rewrites it with O_TRUNC (Perl `open >`, a
// pause, print, close) always gets one whole version: no fault. The
// writer's O_TRUNC cuts the kernel's size of the kernel inode it opened,
// and a map of that inode faults past it (SIGBUS), so with cache=version
// a truncating writer and a reader of another process never share one
// (roles.go, othersHold). With cache=direct every open shares the one
// inode: limitation (c), skipped there. Two readers run at once: a
// commit between a reader's decision and its open of the version once
// put two versions on one node, and their maps mixed them (readerMixes).
func TestMapWhileTruncatingWriter(t *testing.T) {
	const size = 80000 // Apache's page in the bench; it maps what it serves
	m, path := mmSetup(t, mmVersion('a', size))
	if !m.Opts.VersionCache {
		t.Skip("cache=direct: a map faults past a truncating writer's size (docs/threat-model.md, limitations)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a hang only
	defer cancel()
	w := exec.CommandContext(ctx, "perl", "-e", `use Time::HiRes qw(sleep); my $v = 0;
		while (1) { open(my $f, '>', $ARGV[0]) or die "$!"; sleep(0.002);
			print $f (chr(98 + $v++ % 2) x $ARGV[1]); close($f) or die "$!" }`, path, strconv.Itoa(size))
	require.NoError(t, w.Start())
	defer func() { _ = w.Process.Kill(); _ = w.Wait() }()
	var rs []*mmLoop
	for range 2 {
		rs = append(rs, startLoop(t, ctx, "readloop", path, strconv.Itoa(size), "maps"))
	}
	time.Sleep(2 * time.Second)
	for i, r := range rs {
		out := r.stop(t)
		t.Logf("reader %d: %s", i, out)
		assert.Contains(t, out, " bad=0 ", "reader %d read or mapped something else than one whole version", i)
		assert.NotContains(t, out, "reads=0 ", "reader %d read nothing", i)
	}
}

// mmLoop is a helper process running readloop.
type mmLoop struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   bytes.Buffer
	err   bytes.Buffer
}

func mmStartLoop(t *testing.T, ctx context.Context, path string, size int) *mmLoop {
	t.Helper()
	return startLoop(t, ctx, "readloop", path, strconv.Itoa(size))
}

// startLoop starts a helper that runs until its standard input closes.
func startLoop(t *testing.T, ctx context.Context, op, path string, args ...string) *mmLoop {
	t.Helper()
	l := &mmLoop{cmd: mmCommand(ctx, op, path, args...)}
	var err error
	l.stdin, err = l.cmd.StdinPipe()
	require.NoError(t, err)
	l.cmd.Stdout, l.cmd.Stderr = &l.out, &l.err
	require.NoError(t, l.cmd.Start())
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { l.stdin.Close(); _ = l.cmd.Wait() }) })
	return l
}

func (l *mmLoop) stop(t *testing.T) string {
	t.Helper()
	require.NoError(t, l.stdin.Close())
	require.NoError(t, l.cmd.Wait(), "readloop: %s", l.err.String())
	return strings.TrimSpace(l.out.String()) + " "
}

// TestMmapMsyncFsyncCommits: msync(MS_SYNC) and fsync on the writer's fd
// commit: another process sees the new bytes while the writer still has
// the file open and mapped.
func TestMmapMsyncFsyncCommits(t *testing.T) {
	v1, v2 := mmVersion('a', mmPage+1), mmVersion('b', mmPage+1)
	_, path := mmSetup(t, v1)
	w := mmStartSession(t, path)
	w.do(t, "open rw", fmt.Sprint("map ", len(v1)), "fill b", "msync", "fsync")
	mmEqual(t, v2, mmRead(t, path), "another process's read after msync+fsync, writer still open")
	mmEqual(t, v2, mmChild(t, "map", path, nil), "another process's map after msync+fsync, writer still open")
}

// TestMmapGrowWithFtruncate: a writer grows the file with ftruncate and
// writes the new size through a shared map: others see the old size and
// bytes until the close, then the new size and bytes.
func TestMmapGrowWithFtruncate(t *testing.T) {
	v1, v2 := mmVersion('a', 100), mmVersion('b', 3*mmPage+17)
	m, path := mmSetup(t, v1)
	w := mmStartSession(t, path)
	w.do(t, "open rw", fmt.Sprint("ftruncate ", len(v2)), fmt.Sprint("map ", len(v2)), "fill b")
	mmEqual(t, v1, mmRead(t, path), "another process's read before the close")
	w.do(t, "munmap", "close")
	mmEqual(t, v2, mmRead(t, path), "another process's read after the close")
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, int64(len(v2)), st.Size(), "size through the mount")
	mmEqual(t, v2, mmRead(t, m.BackingPath("f")), "the file in BACKING")
}

// TestMmapPrivate: a private map shows the file, takes writes of its
// own, and none of them reach the file.
func TestMmapPrivate(t *testing.T) {
	v1 := mmVersion('a', 2*mmPage+5)
	m, path := mmSetup(t, v1)
	p := mmStartSession(t, path)
	p.do(t, "open rw", fmt.Sprint("mapprivate ", len(v1)))
	mmShows(t, v1, p.do(t, "show"), "the private map")
	mmShows(t, mmVersion('z', len(v1)), p.do(t, "fill z", "show"), "the private map after writing to it")
	p.do(t, "munmap", "close")
	mmEqual(t, v1, mmRead(t, path), "the file after the private map's writes")
	mmEqual(t, v1, mmRead(t, m.BackingPath("f")), "the file in BACKING")
}
