package fs_test

// The kernel keeps one size per inode, used by lseek(SEEK_END); every
// stat's reply would store the caller's size there (attrcache.go). These
// tests run the writer and the stats in helper processes (mmHelper), so
// that each has its own view.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"golang.org/x/sys/unix"
)

// seekEndRounds is how many rewrites the writer checks; the race it
// looks for showed about once in five of gdbm's database creations.
const seekEndRounds = 300

// seekEndLoop rewrites path rounds times: ftruncate to 0, write in
// three pieces, then lseek(SEEK_END) must give what it wrote. Each
// version is larger than the last, or if shrink, cycles through smaller
// ones too. It prints "bad=N first=..." for the rounds where it did not.
func seekEndLoop(path string, rounds int, shrink bool) error {
	bad, first := 0, ""
	for i := range rounds {
		size := 4096 + 41*i // crosses page boundaries
		if shrink {
			size = 4096*(1+i%4) + i
		}
		got, err := seekEndOnce(path, size)
		if err != nil {
			return err
		}
		if got != int64(size) {
			if bad++; bad == 1 {
				first = fmt.Sprintf("round %d: wrote %d, SEEK_END %d", i, size, got)
			}
		}
	}
	fmt.Printf("bad=%d %s\n", bad, first)
	return nil
}

func seekEndOnce(path string, size int) (int64, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if err := f.Truncate(0); err != nil {
		return 0, err
	}
	b := bytes.Repeat([]byte{'x'}, size)
	for _, part := range [][]byte{b[:size/3], b[size/3 : 2*size/3], b[2*size/3:]} {
		if _, err := f.Write(part); err != nil {
			return 0, err
		}
	}
	end, err := f.Seek(0, io.SeekEnd)
	return end, errors.Join(err, f.Close())
}

// statLoop stats path by name and through a read-only descriptor until
// standard input closes, and prints how many times.
func statLoop(path string) error {
	stop := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(stop) }()
	var st unix.Stat_t
	for n := 0; ; n++ {
		select {
		case <-stop:
			fmt.Printf("stats=%d\n", n)
			return nil
		default:
		}
		if err := unix.Stat(path, &st); err != nil {
			return err
		}
		fd, err := unix.Open(path, unix.O_RDONLY, 0)
		if err != nil {
			return err
		}
		err = unix.Fstat(fd, &st)
		unix.Close(fd)
		if err != nil {
			return err
		}
	}
}

// TestSeekEndOwnSizeWhileOthersStat: a writer's lseek(SEEK_END) gives
// the size it wrote while three other processes stat the file (and its
// committed, smaller size) in a loop. gdbm creating a database asks this
// way, and failed ("File seek error") when another process's stat had
// put the committed size in the kernel's inode: 73-91 rounds of 300 were
// wrong before keepSize. The writer's version is larger each round.
func TestSeekEndOwnSizeWhileOthersStat(t *testing.T) {
	out, path := seekEndWithStats(t, "seekend")
	assert.True(t, strings.HasPrefix(out, "bad=0 "), "the writer's SEEK_END after its writes: %s", out)
	last := 4096 + 41*(seekEndRounds-1)
	assert.Len(t, mmRead(t, path), last, "the last version committed")
}

// TestSeekEndShrunkWhileOthersStat: the same with a writer whose version
// is smaller than the committed one in some rounds. Known limitation
// (docs/threat-model.md): another process's stat may then put the committed, larger
// size in the kernel's inode, which a map of that version needs, and
// the writer's SEEK_END gives it. Runs with SAFEFS_TEST_KNOWN_BUGS=1.
func TestSeekEndShrunkWhileOthersStat(t *testing.T) {
	if os.Getenv("SAFEFS_TEST_KNOWN_BUGS") != "1" {
		t.Skip("known limitation: a writer's SEEK_END after shrinking may give the committed size " +
			"(SAFEFS_TEST_KNOWN_BUGS=1 runs it)")
	}
	out, _ := seekEndWithStats(t, "seekshrink")
	assert.True(t, strings.HasPrefix(out, "bad=0 "), "the writer's SEEK_END after its writes: %s", out)
}

// seekEndWithStats runs the helper op (seekEndLoop) on a file while three
// statLoop helpers run, and returns its output and the file's path.
func seekEndWithStats(t *testing.T, op string) (string, string) {
	_, path := mmSetup(t, []byte("committed"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a hang only
	defer cancel()
	var loops []*mmLoop
	for range 3 {
		loops = append(loops, startLoop(t, ctx, "statloop", path))
	}
	out := mmChild(t, op, path, nil)
	for _, l := range loops {
		assert.Contains(t, l.stop(t), "stats=")
	}
	return string(out), path
}
