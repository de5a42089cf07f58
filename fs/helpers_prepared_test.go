package fs_test

// A mount over a backing directory prepared by the test, and what the
// tests read in BACKING and its internal directory.

import (
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/testfs"
)

// advJournalLine frames v as one journal line, as journal.encodeLine does
// (unexported): 8 lowercase hex digits of the crc32c (Castagnoli) of the
// JSON, a space, the JSON, a newline. So the checksum is valid and only
// the content can be refused.
func advJournalLine(t testing.TB, v any) []byte {
	t.Helper()
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Appendf(nil, "%08x %s\n", crc32.Checksum(js, crc32.MakeTable(crc32.Castagnoli)), js)
}

// advPrepared is a safefs mounted over a backing directory that the test
// prepared (testfs.New always starts from an empty one).
type advPrepared struct {
	Backing, Dir string
	srv          *fs.Server
}

// advNewDirs makes an empty backing directory and mount point that other
// users can reach (t.TempDir is 0700).
func advNewDirs(t testing.TB) *advPrepared {
	t.Helper()
	testfs.Available(t)
	root := t.TempDir()
	for _, d := range []string{root, filepath.Dir(root)} {
		must(t, os.Chmod(d, 0o755))
	}
	p := &advPrepared{Backing: filepath.Join(root, "orig"), Dir: filepath.Join(root, "mnt")}
	must(t, os.Mkdir(p.Backing, 0o755))
	must(t, os.Mkdir(p.Dir, 0o755))
	return p
}

// mount mounts safefs over p.Backing; the error is returned, not fatal.
func (p *advPrepared) mount(t testing.TB, edit ...func(*fs.Options)) error {
	t.Helper()
	o := fs.DefaultOptions()
	o.AllowOther = os.Geteuid() == 0
	o.Log = zaptest.NewLogger(t)
	testfs.OptionsFromEnv(&o)
	for _, e := range edit {
		e(&o)
	}
	srv, err := fs.Mount(p.Backing, p.Dir, o)
	if err != nil {
		return err
	}
	p.srv = srv
	t.Cleanup(func() { p.unmount(t) })
	return nil
}

func (p *advPrepared) unmount(t testing.TB) {
	if p.srv == nil {
		return
	}
	srv := p.srv
	p.srv = nil
	if err := srv.Unmount(); err != nil {
		t.Errorf("unmount %s: %v", p.Dir, err)
	}
}

func (p *advPrepared) path(names ...string) string {
	return filepath.Join(append([]string{p.Dir}, names...)...)
}

func (p *advPrepared) bpath(names ...string) string {
	return filepath.Join(append([]string{p.Backing}, names...)...)
}

// advStagingUsage returns the number of entries and the allocated bytes
// (st_blocks*512) of the regular files in BACKING/.safefs/<sub>.
func advStagingUsage(t testing.TB, backing, sub string) (int, int64) {
	t.Helper()
	dir := filepath.Join(backing, fs.InternalDir, sub)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, e := range ents {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dir, e.Name()), &st); err == nil {
			total += st.Blocks * 512
		}
	}
	return len(ents), total
}

// advLstat is unix.Lstat that fails the test.
func advLstat(t testing.TB, p string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatalf("lstat %s: %v", p, err)
	}
	return st
}
