package journal

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// testTargets opens targets under backing like fs/ does, but records every
// call so tests can prove refused records never reach it.
type testTargets struct {
	backing string
	mu      sync.Mutex
	calls   []string
}

func (tt *testTargets) OpenTarget(rel string) (*os.File, error) {
	tt.mu.Lock()
	tt.calls = append(tt.calls, rel)
	tt.mu.Unlock()
	f, err := os.OpenFile(filepath.Join(tt.backing, rel), os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, os.ErrInvalid
	}
	return f, nil
}

// env is a BACKING with its INTERNAL, inside a parent that also holds a
// sentinel file outside BACKING.
type env struct {
	t        *testing.T
	parent   string
	backing  string
	internal string
	sentinel string
	targets  *testTargets
}

func newEnv(t *testing.T) *env {
	parent := t.TempDir()
	e := &env{t: t, parent: parent, backing: filepath.Join(parent, "backing"),
		sentinel: filepath.Join(parent, "outside")}
	e.internal = filepath.Join(e.backing, internalName)
	for _, d := range []string{"", StagingDir, UndoDir, RejectedDir} {
		require.NoError(t, os.MkdirAll(filepath.Join(e.internal, d), 0o700))
	}
	require.NoError(t, os.WriteFile(e.sentinel, []byte("sentinel bytes\n"), 0o600))
	e.targets = &testTargets{backing: e.backing}
	return e
}

// dir opens INTERNAL as the daemon does, closed at the end of the test.
func (e *env) dir() *os.File { return openDir(e.t, e.internal) }

func openDir(t *testing.T, p string) *os.File {
	d, err := os.Open(p)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	return d
}

func (e *env) path(rel string) string { return filepath.Join(e.backing, rel) }

func (e *env) write(rel, data string) {
	require.NoError(e.t, os.MkdirAll(filepath.Dir(e.path(rel)), 0o755))
	require.NoError(e.t, os.WriteFile(e.path(rel), []byte(data), 0o644))
}

func (e *env) read(rel string) string {
	b, err := os.ReadFile(e.path(rel))
	require.NoError(e.t, err)
	return string(b)
}

func (e *env) exists(rel string) bool {
	_, err := os.Lstat(e.path(rel))
	return err == nil
}

func (e *env) devIno(rel string) (uint64, uint64) {
	fi, err := os.Stat(e.path(rel))
	require.NoError(e.t, err)
	st := fi.Sys().(*syscall.Stat_t)
	return uint64(st.Dev), st.Ino
}

// begin logs records as cut-off commits: the journal is closed without
// Close, as a crash would leave it.
func (e *env) begin(recs ...Record) []Record {
	j, err := Open(e.dir(), true, zaptest.NewLogger(e.t))
	require.NoError(e.t, err)
	var out []Record
	for _, r := range recs {
		en, err := j.Begin(r)
		require.NoError(e.t, err)
		out = append(out, en.Record())
	}
	require.NoError(e.t, j.f.Close())
	return out
}

// appendRec describes appending data to rel, whose current content is the
// state before the append.
func (e *env) appendRec(rel, data string) Record {
	dev, ino := e.devIno(rel)
	old := int64(len(e.read(rel)))
	return Record{Kind: Append, Target: rel, Dev: dev, Ino: ino, OldSize: old,
		Len: int64(len(data)), CRC: crc32c([]byte(data))}
}

// inplaceRec saves rel's current content as an undo file.
func (e *env) inplaceRec(rel, undo string) Record {
	old := e.read(rel)
	e.write(filepath.Join(internalName, UndoDir, undo), old)
	dev, ino := e.devIno(rel)
	return Record{Kind: InPlace, Target: rel, Dev: dev, Ino: ino, Undo: undo,
		UndoSize: int64(len(old)), UndoCRC: crc32c([]byte(old))}
}

func (e *env) recover() Summary {
	s, err := Recover(e.dir(), e.targets, zaptest.NewLogger(e.t))
	require.NoError(e.t, err)
	return s
}

// journalBytes returns the raw journal content.
func (e *env) journalBytes() string {
	b, err := os.ReadFile(filepath.Join(e.internal, journalName))
	if os.IsNotExist(err) {
		return ""
	}
	require.NoError(e.t, err)
	return string(b)
}

func (e *env) appendJournal(raw string) {
	f, err := os.OpenFile(filepath.Join(e.internal, journalName), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	require.NoError(e.t, err)
	defer f.Close()
	_, err = f.WriteString(raw)
	require.NoError(e.t, err)
}

func mustLine(t *testing.T, v any) string {
	b, err := encodeLine(v)
	require.NoError(t, err)
	return string(b)
}

func lines(s string) []string {
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

func (e *env) requireSentinel() {
	b, err := os.ReadFile(e.sentinel)
	require.NoError(e.t, err)
	require.Equal(e.t, "sentinel bytes\n", string(b))
}
