package fs_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/testfs"
)

// TestUnlockPublishFails: an unlock whose commit cannot be made (here
// the file was replaced directly in BACKING after the writer opened it:
// ESTALE) fails where the script sees it, the unlock and then its close;
// the lock is released all the same, the bytes are kept in rejected/,
// and the file keeps what BACKING has, as after any rejected commit.
func TestUnlockPublishFails(t *testing.T) {
	m := testfs.New(t)
	p := m.Path("count.txt")
	must(t, os.WriteFile(p, []byte("1\n"), 0o644))

	f, err := os.OpenFile(p, os.O_RDWR, 0)
	must(t, err)
	fd := int(f.Fd())
	must(t, unix.Flock(fd, unix.LOCK_EX))
	_, err = f.WriteAt([]byte("2\n"), 0)
	must(t, err)

	tmp := m.BackingPath("count.tmp")
	must(t, os.WriteFile(tmp, []byte("outside\n"), 0o644))
	must(t, os.Rename(tmp, m.BackingPath("count.txt")))

	if err := unix.Flock(fd, unix.LOCK_UN); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("unlock: %v, want ESTALE (the commit it makes was refused)", err)
	}
	other, err := os.Open(p)
	must(t, err)
	defer other.Close()
	if err := unix.Flock(int(other.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Errorf("the lock was not released by the failed unlock: %v", err)
	}
	if err := f.Close(); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("close after a failed unlock: %v, want ESTALE", err)
	}
	lkwOnlyRejected(t, m, []byte("2\n"))
	got, err := os.ReadFile(m.BackingPath("count.txt"))
	must(t, err)
	if string(got) != "outside\n" {
		t.Errorf("BACKING holds %q, want the file put there directly", got)
	}
	if _, err := os.Stat(filepath.Join(m.Backing, "count.tmp")); !os.IsNotExist(err) {
		t.Errorf("count.tmp: %v", err)
	}
}

// TestUnlockPublishesOtherFiles: a process that locks a lock file,
// rewrites the data file through a descriptor it keeps open, and
// releases the lock has the data file's new version in place when the
// release returns, as on a local file system; before it, a new open
// reads the previous version (the rewrite is still pending).
func TestUnlockPublishesOtherFiles(t *testing.T) {
	m := testfs.New(t)
	data, lock := m.Path("data.txt"), m.Path("data.lock")
	must(t, os.WriteFile(data, []byte("old\n"), 0o644))
	must(t, os.WriteFile(lock, nil, 0o644))

	l, err := os.Open(lock)
	must(t, err)
	defer l.Close()
	must(t, unix.Flock(int(l.Fd()), unix.LOCK_EX))
	w, err := os.OpenFile(data, os.O_RDWR|os.O_TRUNC, 0)
	must(t, err)
	defer w.Close()
	_, err = w.Write([]byte("new\n"))
	must(t, err)
	if got, _ := os.ReadFile(data); string(got) != "old\n" {
		t.Errorf("before the unlock a new open read %q, want the committed %q", got, "old\n")
	}
	must(t, unix.Flock(int(l.Fd()), unix.LOCK_UN))
	if got, _ := os.ReadFile(data); string(got) != "new\n" {
		t.Errorf("after the unlock a new open read %q, want %q", got, "new\n")
	}
	if got, _ := os.ReadFile(m.BackingPath("data.txt")); string(got) != "new\n" {
		t.Errorf("BACKING holds %q after the unlock, want %q", got, "new\n")
	}
}
