package testfs

import (
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/hanwen/go-fuse/v2/posixtest"
)

// posixExcluded are posixtest.All tests not run, neither against the
// mount nor against a plain directory, with the reason.
var posixExcluded = map[string]string{
	// Traditional fcntl locks belong to the process, not to the open
	// file: a second fd of the same process never conflicts, so the
	// expected EAGAIN cannot come on any file system (it fails on ext4
	// too; go-fuse's own posixtest TestAll skips it: "TODO - fix this test").
	"FcntlFlockLocksFile": "same-process F_SETLK on a second fd never conflicts (POSIX locks are per process); fails on ext4 too",
}

// posixExcludedPlain are excluded only against the plain directory.
var posixExcludedPlain = map[string]string{
	// The test tells "the FS followed the symlink" from "we followed it"
	// by st_dev. Here /tmp and /etc are on one file system, so a plain
	// directory always looks "attacked"; through the mount st_dev is the
	// FUSE device and the check means something.
	"OpenSymlinkRace": "tells the attack apart by st_dev: meaningless when the temp dir and /etc/passwd share a device",
}

func posixNames(t *testing.T) []string {
	t.Helper()
	for nm := range posixExcluded {
		if posixtest.All[nm] == nil {
			t.Errorf("posixExcluded names %q, which posixtest.All does not have", nm)
		}
	}
	var names []string
	for nm := range posixtest.All {
		names = append(names, nm)
	}
	sort.Strings(names)
	return names
}

// TestPosixMount runs go-fuse's posixtest suite against safefs, one
// fresh mount per test.
func TestPosixMount(t *testing.T) {
	for _, nm := range posixNames(t) {
		fn := posixtest.All[nm]
		t.Run(nm, func(t *testing.T) {
			if why, ok := posixExcluded[nm]; ok {
				t.Skip(why)
			}
			m := New(t)
			dir := m.Path("posix")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			fn(t, dir)
			NoPendingStaging(t, m)
		})
	}
}

// TestPosixPlain runs the same suite against a plain directory, which
// proves the tests themselves (as go-fuse does).
func TestPosixPlain(t *testing.T) {
	for _, nm := range posixNames(t) {
		fn := posixtest.All[nm]
		t.Run(nm, func(t *testing.T) {
			if why, ok := posixExcluded[nm]; ok {
				t.Skip(why)
			}
			if why, ok := posixExcludedPlain[nm]; ok {
				t.Skip(why)
			}
			dir := filepath.Join(t.TempDir(), "posix")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			fn(t, dir)
		})
	}
}
