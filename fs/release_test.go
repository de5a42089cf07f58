package fs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUnmountClosesBacking: after Unmount nothing of BACKING is held open
// by the daemon (the kernel need not forget every inode first), so the
// file system under BACKING can be unmounted at once.
func TestUnmountClosesBacking(t *testing.T) {
	p := advNewDirs(t)
	must(t, p.mount(t))
	for i := range 200 {
		d := p.path(fmt.Sprintf("d%03d", i), "sub")
		must(t, os.MkdirAll(d, 0o755))
		must(t, os.WriteFile(filepath.Join(d, "f"), []byte("x"), 0o644))
		must(t, os.Remove(filepath.Join(d, "f"))) // a ghost fd until forgotten
	}
	p.unmount(t)
	ents, err := os.ReadDir("/proc/self/fd")
	must(t, err)
	for _, e := range ents {
		l, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err == nil && strings.HasPrefix(l, p.Backing) {
			t.Errorf("fd %s still open after unmount: %s", e.Name(), l)
		}
	}
}
