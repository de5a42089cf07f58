package fs_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/safefs/safefs/testfs"
)

// TestFuseFdNotInherited: a process started after the mount does not
// hold the daemon's /dev/fuse connection (go-fuse opens it without
// O_CLOEXEC; such a child kept a dead mount alive and could answer its
// requests).
func TestFuseFdNotInherited(t *testing.T) {
	m := testfs.New(t)
	must(t, os.WriteFile(m.Path("f"), []byte("x"), 0o644))
	out, err := exec.Command("/bin/sh", "-c", "ls -l /proc/$$/fd").CombinedOutput()
	must(t, err)
	if strings.Contains(string(out), "/dev/fuse") {
		t.Errorf("a child process holds /dev/fuse:\n%s", out)
	}
}
