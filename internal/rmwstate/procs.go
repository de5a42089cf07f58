package rmwstate

import "github.com/safefs/safefs/internal/proc"

// Procs is what the rules need to know of processes: in the daemon
// /proc (System), in tests a given process tree.
type Procs interface {
	Tgid(tid uint32) uint32       // tid's process, 0 if gone
	TgidOrSelf(tid uint32) uint32 // tid's process, tid itself if unknown
	Parent(tid uint32) uint32     // the parent of tid's process, 0 if unknown
	Program(pid uint32) string    // a process's program ("" if unknown)
	RequestFeatures(pid uint32) string
	SingleThreaded(pid uint32) bool
	HoldsLock(pid uint32) (held, known bool) // a flock or fcntl lock
	IsFamily(holder, tid int32) bool         // tid runs in a child of holder
	ShortCmdline(pid uint32) string
}

// System answers from /proc (package proc).
type System struct{}

func (System) Tgid(tid uint32) uint32                  { return proc.Tgid(tid) }
func (System) TgidOrSelf(tid uint32) uint32            { return proc.TgidOrSelf(tid) }
func (System) Parent(tid uint32) uint32                { return proc.Parent(tid) }
func (System) Program(pid uint32) string               { return proc.Program(pid) }
func (System) RequestFeatures(pid uint32) string       { return proc.RequestFeatures(pid) }
func (System) SingleThreaded(pid uint32) bool          { return proc.SingleThreaded(pid) }
func (System) HoldsLock(pid uint32) (held, known bool) { return proc.HoldsLock(pid) }
func (System) IsFamily(holder, tid int32) bool         { return proc.IsFamily(holder, tid) }
func (System) ShortCmdline(pid uint32) string          { return proc.ShortCmdline(pid) }
