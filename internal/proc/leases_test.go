package proc

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A read lease this process takes is listed with its pid, uid, command
// and state; another inode has none.
func TestLeaseHolders(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(p, []byte("x"), 0o644))
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	if _, err := unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_RDLCK); err != nil {
		t.Skipf("no lease here: %v", err)
	}
	defer unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_UNLCK)
	var st unix.Stat_t
	require.NoError(t, unix.Fstat(int(f.Fd()), &st))
	hs := LeaseHolders(uint64(st.Dev), st.Ino)
	require.Len(t, hs, 1)
	comm, err := os.ReadFile("/proc/self/comm")
	require.NoError(t, err)
	assert.Equal(t, LeaseHolder{Pid: os.Getpid(), UID: os.Geteuid(), Comm: strings.TrimSpace(string(comm)), State: "ACTIVE"}, hs[0])
	assert.Empty(t, LeaseHolders(uint64(st.Dev), st.Ino+1<<40))
}

func TestLeaseBreakTime(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/fs/lease-break-time")
	require.NoError(t, err)
	s, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	assert.Equal(t, time.Duration(s)*time.Second, LeaseBreakTime())
}
