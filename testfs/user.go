package testfs

import (
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"syscall"
	"testing"
)

// Cred is the uid and gid of a local user, for running workloads as
// that user (www-data, as a web server would).
type Cred struct{ Uid, Gid uint32 }

// LookupUser returns the credentials of name. It skips the test when the
// daemon is not root (it could not switch user), or the user is missing;
// under CI both are failures.
func LookupUser(t testing.TB, name string) Cred {
	t.Helper()
	skip := t.Skipf
	if os.Getenv("CI") != "" {
		skip = t.Fatalf // CI runs as root on a machine that has the users
	}
	if os.Geteuid() != 0 {
		skip("running as another user needs root")
	}
	u, err := user.Lookup(name)
	if err != nil {
		skip("no user %s: %v", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return Cred{Uid: uint32(uid), Gid: uint32(gid)}
}

// AsUser makes cmd run with c's credentials and no supplementary groups.
func AsUser(cmd *exec.Cmd, c Cred) *exec.Cmd {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: c.Uid, Gid: c.Gid, Groups: []uint32{}}
	return cmd
}
