package fs

import "github.com/safefs/safefs/internal/proc"

// The process of a calling thread is read from /proc (proc.Tgid), which
// costs a file open and read per request. A thread that opened a handle
// of the file is known: its process is the one the handle recorded. This
// trusts a thread id for as long as its handle is open, as the handle's
// own checks (the opener's tgid, proc.HoldsOpen) already do.

// tgidOf is proc.Tgid(tid), answered by the handle when tid opened it.
func (h *handle) tgidOf(tid uint32) uint32 {
	if tgid, ok := h.openedBy(tid); ok {
		return tgid
	}
	return proc.Tgid(tid)
}

// tgidOf is proc.Tgid(tid), answered by one of f's handles that tid opened.
func (f *file) tgidOf(tid uint32) uint32 {
	for _, h := range f.handleList() {
		if tgid, ok := h.openedBy(tid); ok {
			return tgid
		}
	}
	return proc.Tgid(tid)
}

// openedBy returns h's process when thread tid opened h.
func (h *handle) openedBy(tid uint32) (uint32, bool) {
	return h.tgid, tid != 0 && tid == h.tid && h.tgid != 0
}
