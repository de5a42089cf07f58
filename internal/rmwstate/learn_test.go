package rmwstate

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/safefs/safefs/rmw"
)

func path() string { return "f" }

// A thread that read a file and opens it for writing without a session
// is learned; a write outside a session by a process whose child read
// the file, as a family pair. What is learned is saved.
func TestOpenedLearns(t *testing.T) {
	p := newFake()
	p.prog[10] = "/usr/bin/perl /c.pl"
	p.prog[20] = "/bin/sh /s.sh"
	p.prog[21] = "/bin/cat"
	p.parent[21] = 20
	x, dir := newState(t, true, nil, p)

	assert.False(t, x.Opened(1, path, 10, 10, uid, false, false), "a read is only noted")
	assert.False(t, x.Opened(1, path, 10, 10, uid, true, true), "a write in a session is not learned from")
	assert.False(t, x.learned.Has(rmw.Pair{UID: uid, Path: "f", Cmd: p.prog[10]}))
	assert.True(t, x.Opened(1, path, 10, 10, uid, true, false))
	assert.True(t, x.learned.Has(rmw.Pair{UID: uid, Path: "f", Cmd: p.prog[10]}))

	// The file was written: a reader's parent is noted with its read.
	assert.False(t, x.Opened(1, path, 21, 21, uid, false, false))
	assert.True(t, x.Opened(1, path, 20, 20, uid, true, false))
	assert.True(t, x.learned.IsFamily(rmw.Pair{UID: uid, Path: "f", Cmd: p.prog[20]}))

	assert.False(t, x.Opened(2, path, 30, 30, uid, true, false), "no read: nothing to learn")
	assert.False(t, x.Opened(1, path, 10, 0, uid, true, false), "an opener of unknown process")

	saved := Load(dir, zap.NewNop())
	assert.Equal(t, 2, saved.Len())
	assert.True(t, saved.IsFamily(rmw.Pair{UID: uid, Path: "f", Cmd: p.prog[20]}))
}

// A process that holds a lock serializes itself: it is not learned, and
// its lock is looked up in /proc once for a while; a family pair needs
// a process of one thread; a program that cannot be told is not learned.
func TestLearnSkips(t *testing.T) {
	p := newFake()
	p.prog[10], p.locks[10] = "/usr/bin/perl /locks.pl", true
	p.prog[20], p.multi[20] = "/usr/bin/java", true
	p.prog[30] = "/usr/bin/php /daemon-locked.php"
	x, _ := newState(t, true, nil, p, 30)
	x.Learn("f", 10, uid, false)
	x.Learn("f", 10, uid, false)
	assert.Equal(t, 1, p.lockLook, "a pair seen locking is not looked at again")
	x.Learn("f", 20, uid, true)
	x.Learn("f", 30, uid, false)
	x.Learn("f", 40, uid, false)
	assert.Zero(t, x.learned.Len())
	assert.Equal(t, 1, p.lockLook, "a lock held through the daemon is known without /proc")
	x.Learn("f", 20, uid, false)
	assert.Equal(t, 1, x.learned.Len(), "a threaded program is learned as a pair of its own")
}

// A rename over a file by the holder of its session (or a child of the
// holder's process) is its write: the session ends. Another's rename
// moves the session to the renamed file.
func TestRenamed(t *testing.T) {
	p := newFake()
	p.parent[11] = 10
	x, _ := newState(t, false, []string{"*"}, p)
	tbl := x.Table(uid)
	s, _, _ := tbl.Enter(context.Background(), 1, 10, nil, 0)
	x.Renamed(20, uid, 1, 2, "f")()
	assert.False(t, s.Ended(), "another process's rename")
	assert.Same(t, s, tbl.Held(2), "moved to the file now at the path")
	k, at := x.Resolve(1)
	assert.Equal(t, uint64(2), k)
	assert.Equal(t, "f", at)
	x.Renamed(11, uid, 2, 3, "f")()
	assert.True(t, s.Ended(), "the holder's child's rename ends it")
	assert.Nil(t, tbl.Held(3))
	x.Forget(1)
	_, at = x.Resolve(1)
	assert.Empty(t, at)
}

// A rename is learned from when the renamer read the file, or its
// child did, or a sibling read it and the sibling or their parent wrote
// the renamed file (awk f > f.$$ && mv f.$$ f).
func TestRenameLearns(t *testing.T) {
	for _, c := range []struct {
		name          string
		reader        uint32 // reads file 1
		writer        uint32 // opens file 2 for writing (0: none)
		renamer       uint32
		learned       uint32 // the process learned, 0: none
		family        bool
		writtenBefore bool // file 1 was written before its read
	}{
		{"the renamer read it", 101, 0, 101, 101, false, false},
		{"the renamer's child read it", 102, 0, 101, 101, true, true},
		{"a sibling read it and wrote the temporary file", 102, 102, 103, 100, true, true},
		{"a sibling read it, the parent wrote", 102, 100, 103, 100, true, true},
		{"a sibling read it, no one wrote the temporary file", 102, 0, 103, 0, false, true},
		{"a sibling read a file not written lately", 102, 102, 103, 0, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newFake()
			p.prog[100], p.prog[101], p.prog[102], p.prog[103] = "sh", "perl", "awk", "mv"
			p.parent[101], p.parent[103] = 100, 100
			p.parent[102] = 100
			if c.name == "the renamer's child read it" {
				p.parent[102] = 101
			}
			x, _ := newState(t, true, nil, p)
			if c.writtenBefore {
				x.Opened(1, path, 999, 999, uid, true, false)
			}
			x.Opened(1, path, c.reader, c.reader, uid, false, false)
			if c.writer != 0 {
				x.Opened(2, path, c.writer, c.writer, uid, true, false)
			}
			x.Renamed(c.renamer, uid, 1, 2, "f")()
			if c.learned == 0 {
				assert.Zero(t, x.learned.Len())
				return
			}
			pair := rmw.Pair{UID: uid, Path: "f", Cmd: p.prog[c.learned]}
			require.True(t, x.learned.Has(pair))
			assert.Equal(t, c.family, x.learned.IsFamily(pair))
		})
	}
}
