package fs

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/safefs/safefs/lockmgr"
)

// publishGuard guards a wait for a publish against a hang only.
const publishGuard = 30 * time.Second

// waitContent waits until BACKING/log holds want: a publish made while
// the appender keeps its descriptor open.
func waitContent(t *testing.T, backing, want string) {
	t.Helper()
	deadline := time.Now().Add(publishGuard)
	for {
		b, err := os.ReadFile(filepath.Join(backing, "log"))
		require.NoError(t, err)
		if string(b) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v the file holds %q (%d bytes), want %q (%d bytes): not published while the appender lives",
				publishGuard, short(string(b)), len(b), short(want), len(want))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func short(s string) string {
	if len(s) <= 80 {
		return s
	}
	return s[:40] + "..." + s[len(s)-40:]
}

// An appender's complete lines are published while it keeps its
// descriptor open, a partial last line is held until its newline, in
// memory (small) or in a staging file; the appender reads and stats its
// own pending bytes all along, and its close adds only what was held.
func TestAppendPublishLines(t *testing.T) {
	srv, backing, mnt := mountForTest(t, func(o *Options) { o.AppendPublish = 20 * time.Millisecond })
	p := filepath.Join(mnt, "log")
	big := strings.Repeat("b", 3*appendBufMax) + "\n" // staged: over what is kept in memory
	for _, c := range []struct{ name, first, partial string }{
		{"buffered", "one\n", "two, in"},
		{"staged", big, "two, in"},
		{"staged_tail", "one\n", strings.Repeat("t", 2*appendBufMax)}, // a tail staged too
	} {
		t.Run(c.name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(p, []byte("old\n"), 0o644))
			f, err := os.OpenFile(p, os.O_RDWR|os.O_APPEND, 0)
			require.NoError(t, err)
			defer f.Close()
			_, err = f.WriteString(c.first + c.partial)
			require.NoError(t, err)
			// The complete line is published, the partial one held: the
			// publish that shows the first never shows the second.
			waitContent(t, backing, "old\n"+c.first)
			fi, err := f.Stat()
			require.NoError(t, err)
			assert.EqualValues(t, len("old\n"+c.first+c.partial), fi.Size(), "the appender's fstat shows its held bytes")
			buf := make([]byte, fi.Size()+10)
			n, _ := f.ReadAt(buf, 0)
			assert.Equal(t, "old\n"+c.first+c.partial, string(buf[:n]), "the appender reads the file then its held bytes")

			_, err = f.WriteString(" pieces\nthree")
			require.NoError(t, err)
			waitContent(t, backing, "old\n"+c.first+c.partial+" pieces\n")
			require.NoError(t, f.Close())
			requireFile(t, backing, "old\n"+c.first+c.partial+" pieces\nthree")
		})
	}
	assert.Zero(t, srv.r.appendBufs.all.Load(), "bytes left in memory")
	ents, err := os.ReadDir(filepath.Join(backing, InternalDir, "staging"))
	require.NoError(t, err)
	assert.Empty(t, ents, "staging files left")
}

// The bound: whatever the delay, an appender's pending bytes are
// published once they reach appendPendMax, by the write that brings them
// there: complete lines when one ends in their last half, else all of
// them. So they stay bounded in staging however long it keeps writing.
func TestAppendPublishBound(t *testing.T) {
	srv, backing, mnt := mountForTest(t, func(o *Options) { o.AppendPublish = time.Hour })
	p := filepath.Join(mnt, "log")
	line := strings.Repeat("l", 999) + "\n"
	for _, c := range []struct {
		name, unit string
		lines      bool
	}{{"lines", line, true}, {"no_newline", strings.Repeat("z", 1000), false}} {
		t.Run(c.name, func(t *testing.T) {
			f := appender(t, p, "old\n", "")
			chunk := strings.Repeat(c.unit, 64) + "partial" // lines are cut anywhere: stdio's 64 KB writes
			written := 0
			for written < 3*appendPendMax {
				_, err := f.WriteString(chunk)
				require.NoError(t, err)
				written += len(chunk)
				pending := srv.Gauges().PendingBytes
				require.LessOrEqual(t, pending, int64(appendPendMax), "pending bytes after %d written", written)
			}
			b, err := os.ReadFile(filepath.Join(backing, "log"))
			require.NoError(t, err)
			require.Greater(t, len(b), 2*appendPendMax, "published before the close, by the bound")
			if c.lines {
				assert.True(t, bytes.HasSuffix(b, []byte("\n")), "a partial line was published")
			}
			require.NoError(t, f.Close())
			b, err = os.ReadFile(filepath.Join(backing, "log"))
			require.NoError(t, err)
			require.Equal(t, len("old\n")+written, len(b))
			assert.Equal(t, "old\n"+strings.Repeat(chunk, written/len(chunk)), string(b))
		})
	}
}

// ftruncate on an O_APPEND descriptor makes its pending version whole, a
// rewrite that only an explicit commit publishes (here fsync); after it
// the descriptor appends again: its next lines are published at the end
// of the file then current, another appender's line kept.
func TestAppendPublishAfterFtruncate(t *testing.T) {
	_, backing, mnt := mountForTest(t, func(o *Options) { o.AppendPublish = 20 * time.Millisecond })
	p := filepath.Join(mnt, "log")
	f := appender(t, p, "old\n", "a\n")
	require.NoError(t, f.Truncate(int64(len("old\na\n")+2)))
	_, err := f.WriteString("b\n")
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	requireFile(t, backing, "old\na\n\x00\x00b\n")
	appendLine(t, p, "other\n")
	_, err = f.WriteString("c\n")
	require.NoError(t, err)
	waitContent(t, backing, "old\na\n\x00\x00b\nother\nc\n")
	require.NoError(t, f.Close())
	requireFile(t, backing, "old\na\n\x00\x00b\nother\nc\n")
}

// One descriptor shared by fork: a child that writes lines and is killed
// by SIGKILL leaves its complete lines published and nothing for the
// parent to lose or repeat; the parent's lines are published while it
// lives.
func TestAppendPublishForkKilled(t *testing.T) {
	_, backing, mnt := mountForTest(t, func(o *Options) { o.AppendPublish = 20 * time.Millisecond })
	p := filepath.Join(mnt, "log")
	require.NoError(t, os.WriteFile(p, []byte("old\n"), 0o644))
	cmd := exec.Command("perl", "-e", `
		$| = 1;
		open(my $f, '>>', $ARGV[0]) or die "$!";
		my $pid = fork() // die "fork: $!";
		if ($pid == 0) {
			syswrite($f, "child $_\n") for 1 .. 3;
			kill 'KILL', $$;
		}
		waitpid($pid, 0);
		print "CHILD ", $? & 127, "\n";
		syswrite($f, "parent $_\n") for 1 .. 2;
		print "WROTE\n";
		<STDIN>;
		close($f) or die "close: $!";
	`, p)
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	buf := make([]byte, 64)
	var said string
	for !strings.Contains(said, "WROTE\n") {
		n, err := out.Read(buf)
		require.NoError(t, err, "perl said %q", said)
		said += string(buf[:n])
	}
	require.Contains(t, said, "CHILD 9\n", "the child was killed by SIGKILL")
	waitContent(t, backing, "old\nchild 1\nchild 2\nchild 3\nparent 1\nparent 2\n")
	require.NoError(t, in.Close())
	require.NoError(t, cmd.Wait())
	requireFile(t, backing, "old\nchild 1\nchild 2\nchild 3\nparent 1\nparent 2\n")
}

// A publish that cannot take the file's lock (held by a long commit:
// here by the test, past lock_timeout) leaves the lines pending and is
// tried again: nothing goes to rejected/, the appender's close does not
// fail, and the lines are published once the lock is free.
func TestAppendPublishLockBusy(t *testing.T) {
	srv, backing, mnt := mountForTest(t, func(o *Options) {
		o.AppendPublish, o.LockTimeout = 20*time.Millisecond, 50*time.Millisecond
	})
	p := filepath.Join(mnt, "log")
	f := appender(t, p, "old\n", "")
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(p, &st))
	held, err := srv.r.locks.Lock(context.Background(), "test", lockmgr.Key{ID: st.Ino})
	require.NoError(t, err)
	_, err = f.WriteString("one\n")
	require.NoError(t, err)
	// The timer's publish waits at the lock and times out; the next
	// try is another waiter.
	first := lockWaiter(t, srv, st.Ino, 0)
	lockWaiter(t, srv, st.Ino, first)
	_, err = f.WriteString("two\n")
	require.NoError(t, err)
	requireFile(t, backing, "old\n")
	held.Release()
	waitContent(t, backing, "old\none\ntwo\n")
	require.NoError(t, f.Close())
	requireFile(t, backing, "old\none\ntwo\n")
	ents, err := os.ReadDir(filepath.Join(backing, InternalDir, "rejected"))
	require.NoError(t, err)
	assert.Empty(t, ents, "lines kept in rejected/")
}

// lockWaiter waits until the lock of the file numbered ino has a waiter
// other than not, and returns its id.
func lockWaiter(t *testing.T, srv *Server, ino, not uint64) uint64 {
	t.Helper()
	deadline := time.Now().Add(publishGuard)
	for time.Now().Before(deadline) {
		for _, k := range srv.r.locks.Snapshot() {
			for _, w := range k.Waiters {
				if k.Key == ino && w.ID != not {
					return w.ID
				}
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("no publish waited for the file's lock within %v", publishGuard)
	return 0
}
