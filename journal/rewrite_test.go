package journal

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rewriteRec describes a rewrite of rel to data through the staging file
// staging (which must exist: its inode is the new version's).
func (e *env) rewriteRec(rel, staging, data string) Record {
	_, ino := e.devIno(filepath.Join(stagingRel, staging))
	return Record{Kind: RedoReplace, Target: rel, Staging: staging, Ino: ino, Data: []byte(data),
		Len: int64(len(data)), CRC: crc32c([]byte(data)), UID: 1234, GID: 5678, Mode: 0o640}
}

func (e *env) requireVersion(rel, data string) {
	e.t.Helper()
	assert.Equal(e.t, data, e.read(rel))
	var st syscall.Stat_t
	require.NoError(e.t, syscall.Stat(e.path(rel), &st))
	assert.Equal(e.t, [3]uint32{1234, 5678, 0o640}, [3]uint32{st.Uid, st.Gid, st.Mode & 0o7777}, "owner and mode of the record")
}

func requireRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: recovery sets the record's owner")
	}
}

// Renamed or not, synced or not: a rewrite whose record is durable is
// made whole by recovery.
func TestRecoverRewrite(t *testing.T) {
	requireRoot(t)
	for _, c := range []struct {
		name    string
		renamed bool   // the rename reached the disk
		content string // what the new inode holds
	}{
		{"not renamed, bytes lost", false, ""},
		{"not renamed, bytes torn", false, "NEW v\x00\x00"},
		{"renamed, bytes lost", true, ""},
		{"renamed, bytes torn", true, "NEW"},
		{"renamed, whole", true, "NEW version"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.write("data", "old version")
			e.write(filepath.Join(stagingRel, "s1"), c.content)
			rec := e.rewriteRec("data", "s1", "NEW version")
			if c.renamed {
				require.NoError(t, os.Rename(e.path(filepath.Join(stagingRel, "s1")), e.path("data")))
			}
			e.begin(rec)
			assert.Equal(t, Summary{Records: 1, Completed: 1}, e.recoverTwice())
			e.requireVersion("data", "NEW version")
			assert.False(t, e.exists(filepath.Join(stagingRel, "s1")), "staging file left")
		})
	}
}

// The target is another file than the record's (changed outside
// safefs): it is left alone.
func TestRecoverRewriteOtherFile(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	e.write("data", "old version")
	e.write(filepath.Join(stagingRel, "s1"), "")
	rec := e.rewriteRec("data", "s1", "NEW version")
	require.NoError(t, os.Remove(e.path(filepath.Join(stagingRel, "s1"))))
	e.begin(rec)
	assert.Equal(t, 1, e.recover().Refused)
	assert.Equal(t, "old version", e.read("data"))
}

// A later rewrite gives the whole file: an earlier one is superseded.
// A redo append after a rewrite is redone on the rewritten file.
func TestRecoverRewriteThenMore(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	e.write("data", "old")
	e.write(filepath.Join(stagingRel, "s1"), "first")
	r1 := e.rewriteRec("data", "s1", "first")
	require.NoError(t, os.Rename(e.path(filepath.Join(stagingRel, "s1")), e.path("data")))
	e.write(filepath.Join(stagingRel, "s2"), "")
	r2 := e.rewriteRec("data", "s2", "second")
	r3 := e.redoRec("data", " and more") // appended to "second"
	r3.OldSize = int64(len("second"))
	_, r3.Ino = e.devIno(filepath.Join(stagingRel, "s2"))
	e.begin(r1, r2, r3)
	assert.Equal(t, Summary{Records: 3, Completed: 2}, e.recoverTwice())
	e.requireVersion("data", "second and more")
}

func TestRewriteRecordValidation(t *testing.T) {
	e := newEnv(t)
	e.write(filepath.Join(stagingRel, "s1"), "")
	good := e.rewriteRec("data", "s1", "NEW")
	require.NoError(t, good.Validate())
	for name, bad := range map[string]func(r *Record){
		"crc":     func(r *Record) { r.CRC++ },
		"length":  func(r *Record) { r.Len++ },
		"staging": func(r *Record) { r.Staging = "../x" },
		"ino":     func(r *Record) { r.Ino = 0 },
		"mode":    func(r *Record) { r.Mode = 0o100640 },
	} {
		r := good
		bad(&r)
		assert.Error(t, r.Validate(), name)
	}
}
