package journal

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

var lineRE = regexp.MustCompile(`^([0-9a-f]{8}) (\{.*\})$`)

// checkLine verifies a line's frame and returns its JSON.
func checkLine(t *testing.T, l string) string {
	m := lineRE.FindStringSubmatch(l)
	require.NotNil(t, m, "line %q", l)
	require.Equal(t, fmt.Sprintf("%08x", crc32c([]byte(m[2]))), m[1])
	return m[2]
}

func replaceRec(target, staging string) Record {
	return Record{Kind: Replace, Target: target, Staging: staging}
}

func TestBeginCommitAbortLines(t *testing.T) {
	e := newEnv(t)
	j, err := Open(e.dir(), true, zaptest.NewLogger(t))
	require.NoError(t, err)
	a, err := j.Begin(replaceRec("data/a", "s1"))
	require.NoError(t, err)
	b, err := j.Begin(Record{Kind: Append, Target: "data/b", Dev: 7, Ino: 9, OldSize: 3, Len: 4, CRC: 5})
	require.NoError(t, err)
	require.NoError(t, a.Commit())
	require.NoError(t, b.Abort())

	ls := lines(e.journalBytes())
	require.Len(t, ls, 4)
	assert.JSONEq(t, `{"id":1,"kind":"replace","target":"data/a","staging":"s1"}`, checkLine(t, ls[0]))
	assert.JSONEq(t, `{"id":2,"kind":"append","target":"data/b","dev":7,"ino":9,"old_size":3,"len":4,"crc":5}`,
		checkLine(t, ls[1]))
	assert.Equal(t, `{"end":1}`, checkLine(t, ls[2]))
	assert.Equal(t, `{"end":2,"aborted":true}`, checkLine(t, ls[3]))
	assert.Equal(t, uint64(2), b.Record().ID)
	require.NoError(t, j.Close())
	fi, err := os.Stat(filepath.Join(e.internal, journalName))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
}

func TestAbortAfterCommitIsNoop(t *testing.T) {
	e := newEnv(t)
	j, err := Open(e.dir(), false, nil)
	require.NoError(t, err)
	en, err := j.Begin(replaceRec("a", "s"))
	require.NoError(t, err)
	require.NoError(t, en.Commit())
	require.NoError(t, en.Abort())
	require.NoError(t, en.Abort())
	require.ErrorIs(t, en.Commit(), ErrFinished)
	assert.Len(t, lines(e.journalBytes()), 2)
	require.NoError(t, j.Close())
}

func TestBeginRefusesInvalid(t *testing.T) {
	e := newEnv(t)
	j, err := Open(e.dir(), false, nil)
	require.NoError(t, err)
	_, err = j.Begin(replaceRec("../outside", "s"))
	require.Error(t, err)
	assert.Empty(t, e.journalBytes())
	require.NoError(t, j.Close())
	_, err = j.Begin(replaceRec("a", "s"))
	require.ErrorIs(t, err, ErrClosed)
}

func TestIDsContinueAfterReopen(t *testing.T) {
	e := newEnv(t)
	e.begin(replaceRec("a", "s1"), replaceRec("b", "s2"), replaceRec("c", "s3"))
	recs := e.begin(replaceRec("d", "s4"))
	assert.Equal(t, uint64(4), recs[0].ID)
}

func TestOpenEndsTornLine(t *testing.T) {
	e := newEnv(t)
	e.begin(replaceRec("a", "s1"))
	e.appendJournal(`0badc0de {"id":7,"kind":"repl`)
	recs := e.begin(replaceRec("b", "s2"))
	assert.Equal(t, uint64(2), recs[0].ID)
	s, err := scan(strings.NewReader(e.journalBytes()), zaptest.NewLogger(t))
	require.NoError(t, err)
	assert.Equal(t, 1, s.refused)
	require.Len(t, s.cut(), 2)
	assert.Equal(t, "b", s.cut()[1].Target)
}

func TestCloseTruncatesOnlyWhenIdle(t *testing.T) {
	e := newEnv(t)
	j, err := Open(e.dir(), true, nil)
	require.NoError(t, err)
	en, err := j.Begin(replaceRec("a", "s"))
	require.NoError(t, err)
	require.NoError(t, en.Commit())
	require.NoError(t, j.Close())
	assert.Empty(t, e.journalBytes())

	j, err = Open(e.dir(), true, nil)
	require.NoError(t, err)
	_, err = j.Begin(replaceRec("a", "s"))
	require.NoError(t, err)
	require.NoError(t, j.Close())
	ls := lines(e.journalBytes())
	require.Len(t, ls, 1, "an open entry keeps the journal")
	assert.JSONEq(t, `{"id":1,"kind":"replace","target":"a","staging":"s"}`, checkLine(t, ls[0]))
}

func TestConcurrentBegin(t *testing.T) {
	e := newEnv(t)
	j, err := Open(e.dir(), false, zaptest.NewLogger(t))
	require.NoError(t, err)
	const workers, each = 16, 25
	ids := make(chan uint64, workers*each)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				en, err := j.Begin(replaceRec(fmt.Sprintf("w%d/f%d", w, i), fmt.Sprintf("s%d-%d", w, i)))
				if !assert.NoError(t, err) {
					return
				}
				ids <- en.Record().ID
				assert.NoError(t, en.Commit())
			}
		})
	}
	wg.Wait()
	close(ids)
	seen := map[uint64]bool{}
	for id := range ids {
		assert.False(t, seen[id], "duplicate id %d", id)
		seen[id] = true
	}
	assert.Len(t, seen, workers*each)

	s, err := scan(strings.NewReader(e.journalBytes()), zaptest.NewLogger(t))
	require.NoError(t, err)
	assert.Zero(t, s.refused)
	assert.Equal(t, workers*each, s.records)
	assert.Empty(t, s.open, "every record ended")
	assert.Equal(t, uint64(workers*each), s.maxID)
	require.NoError(t, j.Close())
}

func TestValidate(t *testing.T) {
	long := strings.Repeat("a/", maxTarget/2) + "a"
	bad := map[string]Record{
		"unknown kind":     {Kind: "move", Target: "a"},
		"empty target":     replaceRec("", "s"),
		"dot target":       replaceRec(".", "s"),
		"absolute":         replaceRec("/etc/passwd", "s"),
		"dotdot":           replaceRec("../outside", "s"),
		"inner dotdot":     replaceRec("a/../../b", "s"),
		"trailing dotdot":  replaceRec("a/..", "s"),
		"unclean":          replaceRec("a//b", "s"),
		"trailing slash":   replaceRec("a/", "s"),
		"NUL":              replaceRec("a\x00b", "s"),
		"too long":         replaceRec(long, "s"),
		"into INTERNAL":    replaceRec(".safefs/journal", "s"),
		"no staging":       replaceRec("a", ""),
		"staging slash":    replaceRec("a", "x/y"),
		"staging dotdot":   replaceRec("a", ".."),
		"staging dot":      replaceRec("a", "."),
		"staging NUL":      replaceRec("a", "x\x00"),
		"append no ino":    {Kind: Append, Target: "a", Dev: 1},
		"append negative":  {Kind: Append, Target: "a", Ino: 1, OldSize: -1},
		"append overflow":  {Kind: Append, Target: "a", Ino: 1, OldSize: 1 << 62, Len: 1 << 62},
		"inplace no ino":   {Kind: InPlace, Target: "a", Undo: "u"},
		"inplace no undo":  {Kind: InPlace, Target: "a", Ino: 1},
		"inplace bad undo": {Kind: InPlace, Target: "a", Ino: 1, Undo: "../u"},
	}
	for name, r := range bad {
		assert.Error(t, r.Validate(), name)
	}
	assert.ErrorIs(t, replaceRec(long, "s").Validate(), syscall.ENAMETOOLONG, "a deep file's caller gets ENAMETOOLONG, not EIO")
	good := []Record{
		replaceRec("a", "s"),
		replaceRec("dir/with space/..x/\nnewline", "s.tmp"),
		replaceRec(".safefsx/a", "s"),
		{Kind: Append, Target: "a", Ino: 1},
		{Kind: InPlace, Target: "a/b", Ino: 1, Undo: "u1"},
	}
	for _, r := range good {
		assert.NoError(t, r.Validate(), "%+v", r)
	}
}

// A record survives the journal byte for byte, odd names included.
func TestRecordRoundTrip(t *testing.T) {
	r := Record{ID: 3, Kind: InPlace, Target: "é/\"q\"\n\t<x>", Dev: 1<<64 - 1, Ino: 2,
		Undo: "u", UndoSize: 5, UndoCRC: 1<<32 - 1}
	l, err := decodeLine([]byte(strings.TrimSuffix(mustLine(t, r), "\n")))
	require.NoError(t, err)
	assert.Nil(t, l.End)
	assert.Equal(t, r, l.Record)
	js, _ := json.Marshal(r)
	assert.NotContains(t, string(js), "\n")
}

// A file name is bytes: one that is not UTF-8 must come back exact.
func TestRecordRoundTripNotUTF8(t *testing.T) {
	r := Record{ID: 4, Kind: Replace, Target: "d/a\xff\xfe", Staging: "s"}
	require.NoError(t, r.Validate())
	line := mustLine(t, r)
	assert.NotContains(t, line, "\ufffd")
	l, err := decodeLine([]byte(strings.TrimSuffix(line, "\n")))
	require.NoError(t, err)
	assert.Equal(t, r, l.Record)
}

func TestCRC(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), chunk/8+3) // spans chunks
	p := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(p, data, 0o600))
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	for _, c := range [][2]int{{0, len(data)}, {5, 100}, {chunk - 3, chunk + 7}, {10, 0}} {
		got, err := CRC(f, int64(c[0]), int64(c[1]))
		require.NoError(t, err)
		assert.Equal(t, crc32c(data[c[0]:c[0]+c[1]]), got, "%v", c)
	}
	_, err = CRC(f, int64(len(data)-2), 3)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
}

func TestLock(t *testing.T) {
	dir := t.TempDir()
	unlock, err := Lock(openDir(t, dir))
	require.NoError(t, err)
	_, err = Lock(openDir(t, dir))
	require.ErrorIs(t, err, ErrLocked)
	unlock()
	unlock() // idempotent
	unlock2, err := Lock(openDir(t, dir))
	require.NoError(t, err)
	unlock2()
	fi, err := os.Stat(filepath.Join(dir, "lock"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
}

func TestCRCZeros(t *testing.T) {
	for _, n := range []int64{0, 1, 2, 7, 8, 255, 4096, 65537, 1 << 20} {
		for _, start := range []uint32{0, 1, 0xdeadbeef} {
			want := crc32.Update(start, castagnoli, make([]byte, n))
			assert.Equal(t, want, crcZeros(start, n), "n=%d start=%x", n, start)
		}
	}
}

// A sparse file's CRC equals its dense twin's, and its holes are not
// read: 1 TiB of hole takes no time to sum.
func TestCRCSparse(t *testing.T) {
	dir := t.TempDir()
	sparse, err := os.Create(filepath.Join(dir, "sparse"))
	require.NoError(t, err)
	defer sparse.Close()
	const size = 3<<20 + 17
	dense := make([]byte, size)
	for _, off := range []int64{0, 1 << 20, size - 5} {
		_, err := sparse.WriteAt([]byte("data!"), off)
		require.NoError(t, err)
		copy(dense[off:], "data!")
	}
	for _, c := range [][2]int64{{0, size}, {3, size - 3}, {1<<20 + 2, 100}, {4096, 8192}, {size, 0}} {
		got, err := CRC(sparse, c[0], c[1])
		require.NoError(t, err)
		assert.Equal(t, crc32c(dense[c[0]:c[0]+c[1]]), got, "%v", c)
	}
	require.NoError(t, sparse.Truncate(1<<40))
	_, err = CRC(sparse, 0, 1<<40) // a hang here is the failure
	require.NoError(t, err)
}

// Compaction while durable commits sync: a sync that finished must not
// wait for the journal's lock while holding what compaction waits for
// (it deadlocked once redo records made compactions frequent).
func TestConcurrentCommitsWhileCompacting(t *testing.T) {
	old := CompactAt
	CompactAt = 2048 // a compaction every few records
	defer func() { CompactAt = old }()
	e := newEnv(t)
	j, err := Open(e.dir(), true, zaptest.NewLogger(t))
	require.NoError(t, err)
	const workers, each = 8, 40
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i := range each {
					en, err := j.Begin(replaceRec(fmt.Sprintf("w%d/f%d", w, i), "s"))
					if !assert.NoError(t, err) {
						return
					}
					assert.NoError(t, en.Commit())
				}
			})
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("commits stuck: a sync and a compaction wait for each other")
	}
	require.NoError(t, j.Close())
	assert.Empty(t, e.journalBytes(), "every record ended")
}
