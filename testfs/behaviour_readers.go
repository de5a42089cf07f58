package testfs

// Behaviour cases: readers and writers of one file at once.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func caseReadYourWrites(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	f := bhOpen(t, p, os.O_RDWR|os.O_CREATE, 0o644)
	_, err := f.Write([]byte("hello"))
	require.NoError(t, err)
	require.Equal(t, "hello", bhReadAll(t, f))
	_, err = f.WriteAt([]byte(" world"), 5)
	require.NoError(t, err)
	require.Equal(t, "hello world", bhReadAll(t, f))
	require.Equal(t, int64(11), bhFstat(t, f).Size)
	_, err = f.WriteAt([]byte("J"), 0)
	require.NoError(t, err)
	buf := make([]byte, 5)
	_, err = f.ReadAt(buf, 0)
	require.NoError(t, err)
	require.Equal(t, "Jello", string(buf))
	// read(2) continues from the write offset.
	_, err = f.Seek(6, io.SeekStart)
	require.NoError(t, err)
	n, err := f.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "world", string(buf[:n]))
	bhClose(t, f)
	require.Equal(t, "Jello world", bhRead(t, p))
}

func caseReadBeforeWrite(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "current")
	f := bhOpen(t, p, os.O_RDWR, 0)
	require.Equal(t, "current", bhReadAll(t, f))
	_, err := f.WriteAt([]byte("C"), 0)
	require.NoError(t, err)
	require.Equal(t, "Current", bhReadAll(t, f))
	bhClose(t, f)
	require.Equal(t, "Current", bhRead(t, p))
	// A writer opened before another writer's close, and reading only
	// after it, reads that close's content.
	w1 := bhOpen(t, p, os.O_RDWR, 0)
	w2 := bhOpen(t, p, os.O_RDWR, 0)
	_, err = w1.WriteAt([]byte("K"), 0)
	require.NoError(t, err)
	bhClose(t, w1)
	require.Equal(t, "Kurrent", bhReadAll(t, w2))
	_, err = w2.WriteAt([]byte("T"), 6)
	require.NoError(t, err)
	bhClose(t, w2)
	require.Equal(t, "KurrenT", bhRead(t, p))
}

// A reader opened before a writer's close reads, after the close, one
// whole version: the old (safefs) or the new (a plain directory).
func caseReaderOpenedBeforeWriterClose(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	old, new := strings.Repeat("o", 10000), strings.Repeat("N", 12000)
	bhWrite(t, p, old)
	w := bhOpen(t, p, os.O_WRONLY|os.O_TRUNC, 0)
	r1 := bhOpen(t, p, os.O_RDONLY, 0) // opened after the truncating open
	_, err := w.Write([]byte(new))
	require.NoError(t, err)
	r2 := bhOpen(t, p, os.O_RDONLY, 0) // opened after the write
	bhClose(t, w)
	for _, r := range []*os.File{r1, r2} {
		got := bhReadAll(t, r)
		require.True(t, got == "" || got == old || got == new, "read %d bytes: %.20q", len(got), got)
	}
	require.Equal(t, new, bhRead(t, p))
}

// Readers racing a writer never see bytes that were never written, nor
// a size that never was.
func caseReadWhileWriting(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	const size, chunk = 256 << 10, 4096
	bhWrite(t, p, strings.Repeat("A", size))
	w := bhOpen(t, p, os.O_WRONLY, 0)
	done := make(chan struct{})
	errs := make(chan error, 1)
	go func() {
		defer close(errs)
		for {
			select {
			case <-done:
				return
			default:
			}
			b, err := os.ReadFile(p)
			if err != nil {
				errs <- err
				return
			}
			if len(b) != size || len(bytes.Trim(b, "AB")) != 0 {
				errs <- fmt.Errorf("read %d bytes, with %d not A or B", len(b), len(bytes.Trim(b, "AB")))
				return
			}
		}
	}()
	for off := 0; off < size; off += chunk {
		_, err := w.WriteAt(bytes.Repeat([]byte("B"), chunk), int64(off))
		require.NoError(t, err)
	}
	bhClose(t, w)
	close(done)
	require.NoError(t, <-errs)
	require.Equal(t, strings.Repeat("B", size), bhRead(t, p))
}

// The save pattern of editors and config tools: write a temp file, then
// rename it over the name. Readers racing it always find the name (rename
// is atomic), and fstat describes the very file they read.
func caseOpenDuringAtomicReplace(t *testing.T, dir string) {
	p, tmp := filepath.Join(dir, "conf"), filepath.Join(dir, "conf.tmp")
	version := func(i int) []byte { return bytes.Repeat([]byte{'a' + byte(i%26)}, 1+i%97) }
	require.NoError(t, os.WriteFile(p, version(0), 0o644))
	deadline := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; time.Now().Before(deadline); i++ {
			if err := os.WriteFile(tmp, version(i), 0o644); err != nil {
				errs <- err
				return
			}
			if err := unix.Rename(tmp, p); err != nil {
				errs <- err
				return
			}
		}
	}()
	var mu sync.Mutex
	failed := map[string]int{} // kind of failure: count
	first := map[string]error{}
	opens := 0
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				err := readMatchesFstat(p)
				mu.Lock()
				opens++
				if err != nil {
					kind := "fstat/read mismatch"
					if errors.Is(err, unix.ENOENT) {
						kind = "ENOENT"
					} else if errno := unix.Errno(0); errors.As(err, &errno) {
						kind = errno.Error()
					}
					if failed[kind]++; first[kind] == nil {
						first[kind] = err
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for kind, n := range failed {
		t.Errorf("%d of %d opens: %s, first: %v", n, opens, kind, first[kind])
	}
}

// readMatchesFstat opens p, fstats it and reads it whole: the read must
// give st_size bytes, all the same letter (one version).
func readMatchesFstat(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	if int64(len(b)) != st.Size || st.Mode&unix.S_IFMT != unix.S_IFREG || len(b) == 0 || len(bytes.Trim(b, string(b[:1]))) != 0 {
		return fmt.Errorf("fstat says size %d mode %o, read gave %d bytes %.10q", st.Size, st.Mode, len(b), b)
	}
	return nil
}

// While a writer holds unsaved bytes, the size stat gives and the bytes
// a reader gets agree. (nginx sends st_size as Content-Length, then the
// file; PHP's file_get_contents sizes its buffer from fstat.)
func caseStatMatchesRead(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "c")
	// The writer is another process, as the CGI script is to the server.
	line, _, _ := bhHold(t, perlUnsaved, p)
	require.Equal(t, "written\n", line)
	st := bhStat(t, p)
	r := bhOpen(t, p, os.O_RDONLY, 0)
	rst := bhFstat(t, r)
	got := bhReadAll(t, r)
	assert.Equal(t, int64(len(got)), st.Size, "stat(path) size vs bytes read")
	assert.Equal(t, int64(len(got)), rst.Size, "fstat(reader) size vs bytes read")
}

// perlUnsaved writes 100 bytes into an open file and holds it open,
// unclosed, until its stdin closes.
const perlUnsaved = `open(my $fh, "+<", $ARGV[0]) or die "open: $!";
syswrite($fh, "w" x 100) == 100 or die "write: $!";
$| = 1; print "written\n";
<STDIN>;`

// A program that runs a command (system, popen, exec) while it holds a
// file open with unsaved writes: the child's exec closes its copy of the
// close-on-exec fd. Perl marks fds above 2 close-on-exec, as most
// runtimes do.
func caseForkExecWithOpenWriter(t *testing.T, dir string) {
	p := filepath.Join(dir, "f")
	bhWrite(t, p, "old")
	const prog = `open(my $f, "+<", $ARGV[0]) or die "open: $!";
syswrite($f, "NEW") == 3 or die "write: $!";
system("true") == 0 or die "system: $?";
syswrite($f, "!") == 1 or die "write: $!";
close($f) or die "close: $!";`
	out, err := bhRunOrAbort(t, dir, 10*time.Second, "perl", "-e", prog, p)
	require.NoError(t, err, "perl: %s", out)
	require.Equal(t, "NEW!", bhRead(t, p))
}
