package fs

import "sync"

// threadGroups remembers the process of the threads of multi-threaded
// callers (a threaded web server, a Go program), which only a pidfd or
// /proc can tell. Entries are checked at each use (threadOf), so the
// table only saves calls; it is cleared when full rather than aged.
var threadGroups = threadTable{max: 4096}

type threadTable struct {
	mu   sync.Mutex
	max  int
	tgid map[uint32]uint32
}

func (t *threadTable) get(tid uint32) (uint32, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tgid, ok := t.tgid[tid]
	return tgid, ok
}

func (t *threadTable) put(tid, tgid uint32) {
	if tgid == 0 || tgid == tid {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tgid == nil || len(t.tgid) >= t.max {
		t.tgid = make(map[uint32]uint32)
	}
	t.tgid[tid] = tgid
}
