package fs_test

// Shared maps through the mount (issue 10). "Another process" is this
// test binary run again as a helper (TestMmapHelper), so reads, maps and
// commits come from a process other than the mapper's.

import (
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
// (open O_TRUNC, write, close), "readloop" reads it both ways until
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
	case "readloop":
		size, err := strconv.Atoi(args[0])
		if err != nil {
			return err
		}
		return mmReadLoop(path, size)
	}
	return fmt.Errorf("unknown helper op %q", op)
}

func mmReadLoop(path string, size int) error {
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
		if i%2 == 1 {
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
func mmFill(t *testing.T, m, v []byte) {
	t.Helper()
	err := func() (err error) {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("fault writing the map: %v", r)
			}
		}()
		copy(m, v)
		return nil
	}()
	require.NoError(t, err)
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

// mmMap maps the whole of f shared with prot, and unmaps it in cleanup.
func mmMap(t *testing.T, f *os.File, n, prot int) []byte {
	t.Helper()
	m, err := unix.Mmap(int(f.Fd()), 0, n, prot, unix.MAP_SHARED)
	require.NoError(t, err, "mmap MAP_SHARED of %s", f.Name())
	t.Cleanup(func() { _ = unix.Munmap(m) })
	return m
}

func mmMapCopy(t *testing.T, m []byte) []byte {
	t.Helper()
	b, err := mmCopy(m)
	require.NoError(t, err)
	return b
}

// TestMmapReaderKeepsVersion: a reader's shared read-only map shows the
// version it mapped, whole (pages it had touched and pages it had not),
// after another process commits a shorter, different version; its read()
// too. A new open and map, here or elsewhere, shows the new version.
func TestMmapReaderKeepsVersion(t *testing.T) {
	m := testfs.New(t)
	path, page := m.Path("f"), os.Getpagesize()
	v1, v2 := mmVersion('a', 3*page+100), mmVersion('b', page+7)
	require.NoError(t, os.WriteFile(path, v1, 0o644))
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	mp := mmMap(t, f, len(v1), unix.PROT_READ)
	require.Equal(t, v1[0], mp[0]) // the first page is in; the others are not yet
	mmChild(t, "write", path, v2)
	mmEqual(t, v1, mmMapCopy(t, mp), "the reader's map after another process's commit")
	got := make([]byte, len(v1)+1)
	n, err := f.ReadAt(got, 0)
	require.True(t, err == nil || errors.Is(err, io.EOF), "read: %v", err)
	mmEqual(t, v1, got[:n], "the reader's read() after the commit")
	mmEqual(t, v2, mmChild(t, "map", path, nil), "a new map in another process")
	b, err := mmMapRead(path)
	require.NoError(t, err)
	mmEqual(t, v2, b, "a new map in the reader's process")
}

// TestMmapWriterCommitsAtClose: changes made through a writer's shared
// map are not seen by other processes (read or a fresh map) before the
// writer closes, and are seen whole, and in BACKING, after munmap+close.
func TestMmapWriterCommitsAtClose(t *testing.T) {
	m := testfs.New(t)
	path, page := m.Path("f"), os.Getpagesize()
	v1, v2 := mmVersion('a', 2*page+10), mmVersion('b', 2*page+10)
	require.NoError(t, os.WriteFile(path, v1, 0o644))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	mp, err := unix.Mmap(int(f.Fd()), 0, len(v1), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	require.NoError(t, err, "mmap MAP_SHARED read-write")
	mmFill(t, mp, v2)
	mmEqual(t, v1, mmChild(t, "read", path, nil), "another process's read before the writer's close")
	mmEqual(t, v1, mmChild(t, "map", path, nil), "another process's map before the writer's close")
	require.NoError(t, unix.Munmap(mp))
	require.NoError(t, f.Close())
	mmEqual(t, v2, mmChild(t, "read", path, nil), "another process's read after the writer's close")
	mmEqual(t, v2, mmChild(t, "map", path, nil), "another process's map after the writer's close")
	b, err := os.ReadFile(m.BackingPath("f"))
	require.NoError(t, err)
	mmEqual(t, v2, b, "the file in BACKING")
}

// TestMmapWriterAtomicToReaders: two processes read the file in a loop
// (read() and fresh maps, in turn) while a writer commits version after
// version through a shared map: no read is a mix or a part of versions.
func TestMmapWriterAtomicToReaders(t *testing.T) {
	const rounds = 30
	m := testfs.New(t)
	path, size := m.Path("f"), 4*os.Getpagesize()+123
	require.NoError(t, os.WriteFile(path, mmVersion('A', size), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a hang only
	defer cancel()
	readers := make([]*mmLoop, 2)
	for i := range readers {
		readers[i] = mmStartLoop(t, ctx, path, size)
	}
	for r := range rounds {
		mmWriteThroughMap(t, path, mmVersion(byte('a'+r%26), size))
	}
	for i, l := range readers {
		out := l.stop(t)
		t.Logf("reader %d: %s", i, out)
		require.Contains(t, out, " bad=0 ", "reader %d saw a mix", i)
		require.NotContains(t, out, "reads=0 ", "reader %d read nothing", i)
	}
	mmEqual(t, mmVersion(byte('a'+(rounds-1)%26), size), mmChild(t, "read", path, nil), "after the last commit")
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
	l := &mmLoop{cmd: mmCommand(ctx, "readloop", path, strconv.Itoa(size))}
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

// mmWriteThroughMap opens path read-write, copies v over it through a
// shared map (v as long as the file), unmaps and closes.
func mmWriteThroughMap(t *testing.T, path string, v []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	mp, err := unix.Mmap(int(f.Fd()), 0, len(v), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	require.NoError(t, err, "mmap MAP_SHARED read-write")
	mmFill(t, mp, v)
	require.NoError(t, unix.Munmap(mp))
	require.NoError(t, f.Close())
}

// TestMmapMsyncFsyncCommits: msync(MS_SYNC) and fsync on the writer's fd
// commit: another process sees the new bytes while the writer still has
// the file open and mapped.
func TestMmapMsyncFsyncCommits(t *testing.T) {
	m := testfs.New(t)
	path, page := m.Path("f"), os.Getpagesize()
	v1, v2 := mmVersion('a', page+1), mmVersion('b', page+1)
	require.NoError(t, os.WriteFile(path, v1, 0o644))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	mp := mmMap(t, f, len(v1), unix.PROT_READ|unix.PROT_WRITE)
	mmFill(t, mp, v2)
	require.NoError(t, unix.Msync(mp, unix.MS_SYNC))
	require.NoError(t, f.Sync())
	mmEqual(t, v2, mmChild(t, "read", path, nil), "another process's read after msync+fsync, writer still open")
	mmEqual(t, v2, mmChild(t, "map", path, nil), "another process's map after msync+fsync, writer still open")
}

// TestMmapGrowWithFtruncate: a writer grows the file with ftruncate and
// writes the new size through a shared map: others see the old size and
// bytes until the close, then the new size and bytes.
func TestMmapGrowWithFtruncate(t *testing.T) {
	m := testfs.New(t)
	path, page := m.Path("f"), os.Getpagesize()
	v1, v2 := mmVersion('a', 100), mmVersion('b', 3*page+17)
	require.NoError(t, os.WriteFile(path, v1, 0o644))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Truncate(int64(len(v2))))
	mp, err := unix.Mmap(int(f.Fd()), 0, len(v2), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	require.NoError(t, err, "mmap MAP_SHARED read-write")
	mmFill(t, mp, v2)
	mmEqual(t, v1, mmChild(t, "read", path, nil), "another process's read before the close")
	require.NoError(t, unix.Munmap(mp))
	require.NoError(t, f.Close())
	mmEqual(t, v2, mmChild(t, "read", path, nil), "another process's read after the close")
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, int64(len(v2)), st.Size(), "size through the mount")
	b, err := os.ReadFile(m.BackingPath("f"))
	require.NoError(t, err)
	mmEqual(t, v2, b, "the file in BACKING")
}

// TestMmapPrivate: a private map shows the file, takes writes of its
// own, and none of them reach the file.
func TestMmapPrivate(t *testing.T) {
	m := testfs.New(t)
	path, page := m.Path("f"), os.Getpagesize()
	v1 := mmVersion('a', 2*page+5)
	require.NoError(t, os.WriteFile(path, v1, 0o644))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	mp, err := unix.Mmap(int(f.Fd()), 0, len(v1), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
	require.NoError(t, err, "mmap MAP_PRIVATE")
	mmEqual(t, v1, mmMapCopy(t, mp), "the private map")
	mmFill(t, mp, mmVersion('z', len(v1)))
	mmEqual(t, mmVersion('z', len(v1)), mmMapCopy(t, mp), "the private map after writing to it")
	require.NoError(t, unix.Munmap(mp))
	require.NoError(t, f.Close())
	mmEqual(t, v1, mmChild(t, "read", path, nil), "the file after the private map's writes")
	b, err := os.ReadFile(m.BackingPath("f"))
	require.NoError(t, err)
	mmEqual(t, v1, b, "the file in BACKING")
}
