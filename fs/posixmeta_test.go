package fs_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/testfs"
)

// TestTruncOpenUpdatesTimes (pjdfstest open/00.t 43): open(O_WRONLY|O_TRUNC)
// and close of a non-empty file gives it a new mtime and ctime. The new
// version used to be a staging file the pool made ahead, whose times
// were older than the file's.
func TestTruncOpenUpdatesTimes(t *testing.T) {
	m := testfs.New(t)
	p := m.Path("f")
	must(t, os.WriteFile(p, []byte("data\n"), 0o644))
	// Times of now on the kernel's clock for file times (the coarse
	// one): not older than the staging files the pool made at mount.
	now := coarseNow(t)
	must(t, unix.UtimesNano(p, []unix.Timespec{now, now}))
	var before unix.Stat_t
	must(t, unix.Stat(p, &before))
	// The clock moves past both times first, so a stamp of the open's
	// time is later than them, and a pool file's time is not.
	for c := coarseNow(t); c.Nano() <= max(before.Mtim.Nano(), before.Ctim.Nano()); c = coarseNow(t) {
		time.Sleep(time.Millisecond)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	must(t, err)
	must(t, f.Close())
	var after unix.Stat_t
	must(t, unix.Stat(p, &after))
	if after.Size != 0 {
		t.Fatalf("size %d after O_TRUNC", after.Size)
	}
	if after.Mtim.Nano() <= before.Mtim.Nano() || after.Ctim.Nano() <= before.Ctim.Nano() {
		t.Errorf("O_TRUNC did not give the file the open's times: mtime %v -> %v, ctime %v -> %v",
			before.Mtim, after.Mtim, before.Ctim, after.Ctim)
	}
}

// coarseNow is the kernel's coarse clock, the one it stamps files with.
func coarseNow(t *testing.T) unix.Timespec {
	var ts unix.Timespec
	must(t, unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &ts))
	return ts
}

// TestNonOwnerWriteDropsSetID (pjdfstest chmod/12.t): a non-owner who
// writes a set-uid/set-gid file sees the bits gone at once through its
// own descriptor (fstat), and everyone sees them gone after its close.
func TestNonOwnerWriteDropsSetID(t *testing.T) {
	www := testfs.LookupUser(t, "www-data")
	m := testfs.New(t)
	for _, mode := range []uint32{0o4777, 0o2777, 0o6777} {
		p := m.Path("f")
		must(t, os.WriteFile(p, []byte("x"), 0o644))
		must(t, os.Chmod(p, os.FileMode(mode&0o777)|modeBits(mode)))
		cmd := exec.Command("perl", "-e", `open(F, ">>", $ARGV[0]) or die "$!"; syswrite(F, "y") or die "$!";
			printf("%o\n", (stat(F))[2] & 07777); close(F) or die "$!"`, p)
		testfs.AsUser(cmd, www)
		out, err := cmd.CombinedOutput()
		must(t, err)
		if got := strings.TrimSpace(string(out)); got != "777" {
			t.Errorf("mode %o: the writer's fstat after its write shows %s, want 777", mode, got)
		}
		var st unix.Stat_t
		must(t, unix.Stat(p, &st))
		if st.Mode&0o7777 != 0o777 {
			t.Errorf("mode %o: a stat after the writer's close shows %o, want 777", mode, st.Mode&0o7777)
		}
		must(t, os.Remove(p))
	}
}

func modeBits(mode uint32) os.FileMode {
	var m os.FileMode
	if mode&0o4000 != 0 {
		m |= os.ModeSetuid
	}
	if mode&0o2000 != 0 {
		m |= os.ModeSetgid
	}
	return m
}
