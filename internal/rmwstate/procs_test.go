package rmwstate

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// fakeProcs is a given process tree: threads not in tgid are processes
// of their own.
type fakeProcs struct {
	mu       sync.Mutex
	tgid     map[uint32]uint32 // thread → its process
	parent   map[uint32]uint32 // process → its parent
	prog     map[uint32]string
	multi    map[uint32]bool // processes of several threads
	locks    map[uint32]bool // processes holding a flock or fcntl lock
	lockLook int             // HoldsLock calls
}

func newFake() *fakeProcs {
	return &fakeProcs{tgid: map[uint32]uint32{}, parent: map[uint32]uint32{}, prog: map[uint32]string{},
		multi: map[uint32]bool{}, locks: map[uint32]bool{}}
}

func (f *fakeProcs) Tgid(tid uint32) uint32 {
	if p, ok := f.tgid[tid]; ok {
		return p
	}
	return tid
}
func (f *fakeProcs) TgidOrSelf(tid uint32) uint32      { return f.Tgid(tid) }
func (f *fakeProcs) Parent(tid uint32) uint32          { return f.parent[f.Tgid(tid)] }
func (f *fakeProcs) Program(pid uint32) string         { return f.prog[pid] }
func (f *fakeProcs) RequestFeatures(pid uint32) string { return "" }
func (f *fakeProcs) SingleThreaded(pid uint32) bool    { return !f.multi[pid] }
func (f *fakeProcs) ShortCmdline(pid uint32) string    { return f.prog[pid] }
func (f *fakeProcs) HoldsLock(pid uint32) (bool, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lockLook++
	return f.locks[pid], true
}

// IsFamily: tid's process is holder's, or a descendant of it.
func (f *fakeProcs) IsFamily(holder, tid int32) bool {
	for p := f.Tgid(uint32(tid)); p > 1; p = f.parent[p] {
		if p == uint32(holder) {
			return true
		}
	}
	return false
}

// newState is a state over procs, storing in a fresh directory;
// daemonLocks are the processes holding a script lock through the
// daemon.
func newState(t *testing.T, auto bool, globs []string, procs Procs, daemonLocks ...uint32) (*State, int) {
	dir, err := unix.Open(t.TempDir(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(dir) })
	held := func(pid uint32) bool {
		for _, p := range daemonLocks {
			if p == pid {
				return true
			}
		}
		return false
	}
	return New(Config{Globs: globs, Auto: auto, Dir: dir, Procs: procs, Log: zap.NewNop(), LockHeld: held}), dir
}
