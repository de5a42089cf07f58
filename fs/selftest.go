package fs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"go.uber.org/zap"
)

// selfTestPrefix names the probe file of the kill-check self-test. It
// exists at the top of the mount for the few milliseconds of the test.
const selfTestPrefix = ".safefs-selftest-"

// killCheckSelfTest proves, at mount, that a writer killed by SIGKILL is
// seen as killed: a shell opens a probe file through the mount, writes
// one byte, and kills itself. The write must not commit.
func (r *root) killCheckSelfTest(mountpoint string) bool {
	probe := filepath.Join(mountpoint, selfTestPrefix+tempName())
	r.selfTestSeen.Store(false)
	cmd := exec.Command("/bin/sh", "-c", `exec >>"$0" && printf x && kill -KILL $$`, probe)
	_ = cmd.Run() // it dies by SIGKILL: an error is the expected outcome
	// A stop point for tests only.
	r.crash("selftest-killed")
	st, err := os.Stat(probe)
	defer os.Remove(probe)
	ok := err == nil && st.Size() == 0 && r.selfTestSeen.Load()
	if ok {
		r.log.Info("kill-check self-test passed: a writer killed by SIGKILL did not commit")
	} else {
		r.log.Error("kill-check self-test failed: writers killed by a signal would commit",
			zap.NamedError("stat", err))
	}
	return ok
}

// isSelfTestProbe reports whether path (below the mount root) is the
// self-test's probe file.
func isSelfTestProbe(path string) bool {
	return strings.HasPrefix(path, selfTestPrefix) && !strings.Contains(path, "/")
}
