package journal

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

var (
	stagingRel = filepath.Join(internalName, StagingDir)
	undoRel    = filepath.Join(internalName, UndoDir)
)

// recoverTwice recovers, checks the journal is empty, and checks a second
// recovery finds nothing to do.
func (e *env) recoverTwice() Summary {
	s := e.recover()
	assert.Empty(e.t, e.journalBytes())
	assert.Equal(e.t, Summary{}, e.recover(), "second recovery")
	e.requireSentinel()
	return s
}

func TestRecoverReplace(t *testing.T) {
	e := newEnv(t)
	e.write("data/a", "old a")
	e.write("data/b", "new b")
	e.write(filepath.Join(stagingRel, "sa"), "new a")
	e.begin(replaceRec("data/a", "sa"), replaceRec("data/b", "sb"))

	s := e.recoverTwice()
	assert.Equal(t, Summary{Records: 2, Completed: 1, RolledBack: 1}, s)
	assert.False(t, e.exists(filepath.Join(stagingRel, "sa")))
	assert.Equal(t, "old a", e.read("data/a"))
	assert.Equal(t, "new b", e.read("data/b"))
}

// appendCase is what reached the file of a cut-off append of "WORLD" to
// "hello ", and what recovery must leave.
type appendCase struct {
	name    string
	written string
	want    string
	sum     Summary
}

// recoverAppendCases runs each case with the record rec makes.
func recoverAppendCases(t *testing.T, rec func(e *env, rel, data string) Record, cases []appendCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.write("log", "hello ")
			e.begin(rec(e, "log", "WORLD"))
			e.write("log", "hello "+c.written) // same inode: WriteFile truncates in place
			assert.Equal(t, c.sum, e.recoverTwice())
			assert.Equal(t, c.want, e.read("log"))
		})
	}
}

func TestRecoverAppend(t *testing.T) {
	recoverAppendCases(t, (*env).appendRec, []appendCase{
		{"complete", "WORLD", "hello WORLD", Summary{Records: 1, Completed: 1}},
		{"partial", "WOR", "hello ", Summary{Records: 1, RolledBack: 1}},
		{"same length, wrong bytes", "W\x00RLD", "hello ", Summary{Records: 1, RolledBack: 1}},
		{"longer garbage", "WORLD and more", "hello ", Summary{Records: 1, RolledBack: 1}},
		{"nothing", "", "hello ", Summary{Records: 1, RolledBack: 1}},
	})
}

func TestRecoverAppendNeverBelowOldSize(t *testing.T) {
	e := newEnv(t)
	e.write("log", "hello ")
	e.begin(e.appendRec("log", "WORLD"))
	e.write("log", "hel") // shrunk by someone else: not ours to fix
	assert.Equal(t, Summary{Records: 1, RolledBack: 1}, e.recoverTwice())
	assert.Equal(t, "hel", e.read("log"))
}

func TestRecoverAppendWrongFile(t *testing.T) {
	e := newEnv(t)
	e.write("log", "hello ")
	rec := e.appendRec("log", "WORLD")
	require.NoError(t, os.Rename(e.path("log"), e.path("log.old"))) // keeps the inode busy
	e.write("log", "a new file, longer")
	e.write("gone", "x")
	e.begin(rec, e.appendRec("gone", "y"))
	require.NoError(t, os.Remove(e.path("gone")))

	assert.Equal(t, Summary{Records: 2, Refused: 2}, e.recoverTwice())
	assert.Equal(t, "a new file, longer", e.read("log"))
}

func (e *env) writeAt(rel string, off int64, data string) {
	f, err := os.OpenFile(e.path(rel), os.O_WRONLY, 0)
	require.NoError(e.t, err)
	defer f.Close()
	_, err = f.WriteAt([]byte(data), off)
	require.NoError(e.t, err)
}

func TestRecoverInPlace(t *testing.T) {
	e := newEnv(t)
	e.write("restore", "original content")
	e.write("done", "before")
	e.begin(e.inplaceRec("restore", "u1"), e.inplaceRec("done", "u2"))
	e.write("restore", "NEW CONTENT THAT IS LONGER") // same inode
	require.NoError(t, os.Remove(e.path(filepath.Join(undoRel, "u2"))))
	e.write("done", "after")

	assert.Equal(t, Summary{Records: 2, Completed: 1, RolledBack: 1}, e.recoverTwice())
	assert.Equal(t, "original content", e.read("restore"))
	assert.Equal(t, "after", e.read("done"))
	assert.False(t, e.exists(filepath.Join(undoRel, "u1")))
}

func TestRecoverInPlaceCorruptUndo(t *testing.T) {
	e := newEnv(t)
	e.write("f", "original")
	rec := e.inplaceRec("f", "u1")
	e.begin(rec)
	e.write(filepath.Join(undoRel, "u1"), "origXnal") // same size, bad CRC
	e.writeAt("f", 0, "NEW")

	assert.Equal(t, Summary{Records: 1, Refused: 1}, e.recoverTwice())
	assert.Equal(t, "NEWginal", e.read("f"), "target left as it is")
	assert.False(t, e.exists(filepath.Join(undoRel, "u1")))
	kept := filepath.Join(internalName, RejectedDir, "undo-u1")
	assert.Equal(t, "origXnal", e.read(kept), "undo bytes kept for a human")
	assert.Empty(t, e.targets.calls, "an unverified undo never reaches the target")
}

func TestRecoverInPlaceWrongFile(t *testing.T) {
	e := newEnv(t)
	e.write("f", "original")
	rec := e.inplaceRec("f", "u1")
	e.begin(rec)
	require.NoError(t, os.Rename(e.path("f"), e.path("f.old")))
	e.write("f", "someone else's file")

	assert.Equal(t, Summary{Records: 1, Refused: 1}, e.recoverTwice())
	assert.Equal(t, "someone else's file", e.read("f"))
	assert.Equal(t, "original", e.read(filepath.Join(internalName, RejectedDir, "undo-u1")))
}

func TestRecoverInPlaceShortUndoWithoutRejectedDir(t *testing.T) {
	e := newEnv(t)
	require.NoError(t, os.Remove(filepath.Join(e.internal, RejectedDir)))
	e.write("f", "original")
	e.begin(e.inplaceRec("f", "u1"))
	e.write(filepath.Join(undoRel, "u1"), "orig")

	assert.Equal(t, Summary{Records: 1, Refused: 1}, e.recover())
	assert.Equal(t, "orig", e.read(filepath.Join(undoRel, "u1")), "left, not swept")
	assert.Equal(t, "original", e.read("f"))
}

func TestRecoverSameTargetOnlyLastMatters(t *testing.T) {
	e := newEnv(t)
	e.write("log", "a")
	r1 := e.appendRec("log", "b")
	e.write("log", "ab")
	r2 := e.appendRec("log", "c")
	e.write("log", "abc")
	r3 := e.appendRec("log", "d") // the crash: "d" never written
	e.write("other", "1")
	r4 := e.appendRec("other", "2")
	e.write("other", "12")
	r5 := e.appendRec("other", "3")
	e.write("other", "123")
	e.begin(r1, r2, r3, r4)
	j, err := Open(e.dir(), false, nil)
	require.NoError(t, err)
	// A later finished commit on "other" makes r4 older state too.
	en, err := j.Begin(r5)
	require.NoError(t, err)
	require.NoError(t, en.Commit())
	require.NoError(t, j.f.Close())

	assert.Equal(t, Summary{Records: 5, RolledBack: 1}, e.recoverTwice())
	assert.Equal(t, "abc", e.read("log"))
	assert.Equal(t, "123", e.read("other"))
}

func TestRecoverIgnoresFinished(t *testing.T) {
	e := newEnv(t)
	e.write("log", "hello ")
	j, err := Open(e.dir(), false, nil)
	require.NoError(t, err)
	a, err := j.Begin(e.appendRec("log", "x"))
	require.NoError(t, err)
	require.NoError(t, a.Commit())
	b, err := j.Begin(replaceRec("r", "s"))
	require.NoError(t, err)
	require.NoError(t, b.Abort())
	require.NoError(t, j.f.Close())
	e.write("log", "hello and much more")
	e.write(filepath.Join(stagingRel, "s"), "x")

	assert.Equal(t, Summary{Records: 2, Orphans: 1}, e.recoverTwice())
	assert.Equal(t, "hello and much more", e.read("log"))
}

func TestRecoverRefusesBadLines(t *testing.T) {
	e := newEnv(t)
	e.write("log", "hello ")
	good := e.appendRec("log", "WORLD")
	e.write("log", "hello WOR")
	core, logs := observer.New(zapcore.WarnLevel)
	e.appendJournal(strings.Join([]string{
		mustLine(t, replaceRec("../outside", "s")),
		mustLine(t, Record{ID: 2, Kind: Append, Target: "/etc/passwd", Ino: 1}),
		mustLine(t, Record{ID: 3, Kind: Append, Target: ".safefs/journal", Ino: 1}),
		"deadbeef " + mustLine(t, Record{ID: 4, Kind: Replace, Target: "a", Staging: "s"})[9:],
		"\x00\x01garbage\xff\n",
		"0000000g {}\n",
		mustLine(t, Record{ID: 0, Kind: Replace, Target: "a", Staging: "s"}),
		mustLine(t, map[string]any{"end": 9, "target": "x"}),
		mustLine(t, "just a string"),
		strings.Repeat("x", 2<<20) + "\n",
		mustLine(t, Record{ID: 10, Kind: good.Kind, Target: good.Target, Dev: good.Dev,
			Ino: good.Ino, OldSize: good.OldSize, Len: good.Len, CRC: good.CRC}),
		`12345678 {"id":11,"kind":"replace"`, // torn
	}, ""))

	s, err := Recover(e.dir(), e.targets, zap.New(core))
	require.NoError(t, err)
	assert.Equal(t, Summary{Records: 1, RolledBack: 1, Refused: 10, Torn: 1}, s)
	assert.Equal(t, "hello ", e.read("log"), "the good record is still settled")
	assert.Equal(t, []string{"log"}, e.targets.calls, "refused records never reach Targets")
	e.requireSentinel()
	assert.NotEmpty(t, logs.FilterMessage("journal: refused").
		FilterField(zap.String("target", "../outside")).All())
	assert.Empty(t, e.journalBytes())
}

func TestRecoverOrphans(t *testing.T) {
	e := newEnv(t)
	e.write(filepath.Join(stagingRel, "o1"), "x")
	e.write(filepath.Join(stagingRel, "o2"), "y")
	e.write(filepath.Join(undoRel, "u"), "z")
	link := filepath.Join(e.internal, StagingDir, "link")
	require.NoError(t, os.Symlink(e.sentinel, link))
	require.NoError(t, os.Symlink(e.sentinel, filepath.Join(e.internal, UndoDir, "ulink")))
	require.NoError(t, os.Mkdir(filepath.Join(e.internal, StagingDir, "sub"), 0o700))
	e.write(filepath.Join(stagingRel, "sub", "deep"), "d")
	e.write(filepath.Join(internalName, RejectedDir, "r"), "kept")

	assert.Equal(t, Summary{Orphans: 3}, e.recoverTwice())
	names, err := os.ReadDir(filepath.Join(e.internal, StagingDir))
	require.NoError(t, err)
	assert.Len(t, names, 2) // link and sub, untouched
	target, err := os.Readlink(link)
	require.NoError(t, err)
	assert.Equal(t, e.sentinel, target)
	assert.Equal(t, "d", e.read(filepath.Join(stagingRel, "sub", "deep")))
	assert.Equal(t, "kept", e.read(filepath.Join(internalName, RejectedDir, "r")))
}

// A symlink where a staging or undo file is expected is never followed.
func TestRecoverSymlinkedStagingAndUndo(t *testing.T) {
	e := newEnv(t)
	e.write("f", "original")
	rec := e.inplaceRec("f", "u1")
	require.NoError(t, os.Remove(e.path(filepath.Join(undoRel, "u1"))))
	require.NoError(t, os.Symlink(e.sentinel, filepath.Join(e.internal, UndoDir, "u1")))
	require.NoError(t, os.Symlink(e.sentinel, filepath.Join(e.internal, StagingDir, "s")))
	e.begin(replaceRec("r", "s"), rec)

	assert.Equal(t, Summary{Records: 2, Refused: 2}, e.recoverTwice())
	assert.Equal(t, "original", e.read("f"))
	assert.True(t, e.exists(filepath.Join(stagingRel, "s")))
}

func TestRecoverFresh(t *testing.T) {
	e := newEnv(t)
	assert.Equal(t, Summary{}, e.recover())
	assert.False(t, e.exists(filepath.Join(internalName, journalName)), "fresh stays fresh")
}

// INTERNAL itself is opened and checked by fs (fs/internal.go); inside
// it, a symlinked journal is never followed.
func TestRecoverRefusesSymlinkedJournal(t *testing.T) {
	e := newEnv(t)
	require.NoError(t, os.Symlink(e.sentinel, filepath.Join(e.internal, journalName)))
	_, err := Recover(e.dir(), e.targets, nil)
	require.Error(t, err)
	e.requireSentinel()
}

// crashScenario leaves one cut-off commit of each kind needing work.
func crashScenario(e *env) {
	e.write("r", "old r")
	e.write(filepath.Join(stagingRel, "sr"), "new r")
	e.write("log", "hello ")
	ra := e.appendRec("log", "WORLD")
	e.write("f", "original content")
	ri := e.inplaceRec("f", "u1")
	e.begin(replaceRec("r", "sr"), ra, ri)
	e.write("log", "hello WOR")
	e.write("f", "NEW CONTENT, LONGER THAN BEFORE")
}

func requireSettled(e *env) {
	assert.Equal(e.t, "old r", e.read("r"))
	assert.Equal(e.t, "hello ", e.read("log"))
	assert.Equal(e.t, "original content", e.read("f"))
	for _, d := range []string{StagingDir, UndoDir} {
		names, err := os.ReadDir(filepath.Join(e.internal, d))
		require.NoError(e.t, err)
		assert.Empty(e.t, names, d)
	}
	assert.Empty(e.t, e.journalBytes())
	e.requireSentinel()
}

func TestRecoverKilledHalfway(t *testing.T) {
	e := newEnv(t)
	crashScenario(e)
	r, err := openRecovery(e.dir(), e.targets, zaptest.NewLogger(t))
	require.NoError(t, err)
	cut, err := r.read()
	require.NoError(t, err)
	require.Len(t, cut, 3)
	require.NoError(t, r.settle(cut[1])) // killed after one step
	r.close()
	assert.Equal(t, "hello ", e.read("log"))

	assert.Equal(t, Summary{Records: 3, RolledBack: 3}, e.recover())
	requireSettled(e)
}

func TestRecoverKilledDuringRestore(t *testing.T) {
	e := newEnv(t)
	crashScenario(e)
	// By hand: the restore copied half the undo bytes, then died.
	e.writeAt("f", 0, "original")
	assert.Equal(t, Summary{Records: 3, RolledBack: 3}, e.recover())
	requireSettled(e)
}

func TestRecoverKilledBeforeTruncate(t *testing.T) {
	e := newEnv(t)
	crashScenario(e)
	r, err := openRecovery(e.dir(), e.targets, zaptest.NewLogger(t))
	require.NoError(t, err)
	cut, err := r.read()
	require.NoError(t, err)
	for _, rec := range cut {
		require.NoError(t, r.settle(rec))
	}
	require.NoError(t, r.sweep())
	r.close() // killed before finish: the journal still lists everything

	// The work is done: replace and inplace now read as committed, the
	// append as nothing written. Nothing changes.
	assert.Equal(t, Summary{Records: 3, Completed: 2, RolledBack: 1}, e.recover())
	requireSettled(e)
}
