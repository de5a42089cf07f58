package journal

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// redoRec is appendRec carrying its bytes: a redo record.
func (e *env) redoRec(rel, data string) Record {
	r := e.appendRec(rel, data)
	r.Kind, r.Data = RedoAppend, []byte(data)
	return r
}

// A redo record was committed when it became durable: whatever reached
// the file, recovery leaves the append whole, and bytes after it alone.
func TestRecoverRedo(t *testing.T) {
	recoverAppendCases(t, (*env).redoRec, []appendCase{
		{"complete", "WORLD", "hello WORLD", Summary{Records: 1, Completed: 1}},
		{"nothing", "", "hello WORLD", Summary{Records: 1, Completed: 1}},
		{"partial", "WOR", "hello WORLD", Summary{Records: 1, Completed: 1}},
		{"zeros", "\x00\x00\x00\x00\x00", "hello WORLD", Summary{Records: 1, Completed: 1}},
		{"and a later append", "WORLD!!", "hello WORLD!!", Summary{Records: 1, Completed: 1}},
		{"torn, later bytes", "W\x00RLD!!", "hello WORLD!!", Summary{Records: 1, Completed: 1}},
	})
}

// Redo records of one file are all redone, in order: a later record does
// not supersede an earlier one, whose bytes may not be in the file.
func TestRecoverRedoSeveral(t *testing.T) {
	e := newEnv(t)
	e.write("log", "a")
	r1 := e.redoRec("log", "bb")
	e.write("log", "abb")
	r2 := e.redoRec("log", "ccc")
	e.write("log", "a") // neither reached the disk
	e.begin(r1, r2)
	assert.Equal(t, Summary{Records: 2, Completed: 2}, e.recoverTwice())
	assert.Equal(t, "abbccc", e.read("log"))
}

func TestRecoverRedoShorterFileLeftAlone(t *testing.T) {
	e := newEnv(t)
	e.write("log", "hello ")
	e.begin(e.redoRec("log", "WORLD"))
	e.write("log", "hel") // cut outside safefs: not ours to fix
	assert.Equal(t, Summary{Records: 1, Refused: 1}, e.recover())
	assert.Equal(t, "hel", e.read("log"))
}

func TestRedoRecordValidation(t *testing.T) {
	e := newEnv(t)
	e.write("log", "hello ")
	good := e.redoRec("log", "WORLD")
	require.NoError(t, good.Validate())
	assert.True(t, good.Redo())
	for name, bad := range map[string]func(r *Record){
		"length":  func(r *Record) { r.Len++ },
		"crc":     func(r *Record) { r.CRC++ },
		"staging": func(r *Record) { r.Staging = "s1" },
		"no data": func(r *Record) { r.Data, r.Len, r.CRC = nil, 0, crc32c(nil) },
		"size": func(r *Record) {
			r.Data = []byte(strings.Repeat("x", MaxRedo+1))
			r.Len, r.CRC = int64(len(r.Data)), crc32c(r.Data)
		},
	} {
		r := good
		bad(&r)
		assert.Error(t, r.Validate(), name)
	}
}

// A line whose data was damaged does not verify: the record is refused
// and the file left as it is (never other bytes written into it).
func TestRecoverRedoDamagedLine(t *testing.T) {
	e := newEnv(t)
	e.write("log", "hello ")
	r := e.redoRec("log", "WORLD")
	r.ID = 1
	r.Data = []byte("EVIL!")
	line := mustLine(t, r) // framed with a CRC of its own, so only the record check can catch it
	e.appendJournal(line)
	s := e.recover()
	assert.Equal(t, 1, s.Refused)
	assert.Equal(t, "hello ", e.read("log"))
}
