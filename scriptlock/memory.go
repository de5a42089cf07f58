package scriptlock

import (
	"context"
	"sync"
)

// Memory keeps script locks in the daemon itself, for one host: the
// locks of a logical file then hold whichever kernel inode each process
// reached it through (locks=daemon). Same semantics as Table, without
// nodes or leases.
type Memory struct {
	mu    sync.Mutex
	files map[string]*memFile
}

var _ Locker = (*Memory)(nil)

// NewMemory returns an empty table.
func NewMemory() *Memory { return &Memory{files: map[string]*memFile{}} }

type memOwner struct {
	id    uint64
	flock bool // flock and fcntl locks do not see each other
}

type memEntry struct {
	pid    uint32
	ranges []Range
}

// memFile is one file's locks; changed is closed (and replaced) at every
// change, which wakes the waiters.
type memFile struct {
	owners  map[memOwner]memEntry
	changed chan struct{}
}

// file returns key's locks, made if absent; m.mu held.
func (m *Memory) file(key string) *memFile {
	f := m.files[key]
	if f == nil {
		f = &memFile{owners: map[memOwner]memEntry{}, changed: make(chan struct{})}
		m.files[key] = f
	}
	return f
}

// conflict returns another owner's lock of r's kind that conflicts with
// r; m.mu held.
func (f *memFile) conflict(r Request) (Held, bool) {
	me := memOwner{r.Owner, r.Flock}
	for o, e := range f.owners {
		if o == me || o.flock != r.Flock {
			continue
		}
		if rg, ok := FirstConflict(e.ranges, r.Range); ok {
			return Held{Pid: e.pid, Range: rg}, true
		}
	}
	return Held{}, false
}

// Get returns a lock of another owner that conflicts with r.
func (m *Memory) Get(_ context.Context, r Request) (Held, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.files[r.Key]
	if f == nil {
		return Held{}, false, nil
	}
	h, ok := f.conflict(r)
	return h, ok, nil
}

// Set applies r: see Locker.
func (m *Memory) Set(ctx context.Context, r Request, wait bool) (bool, error) {
	me := memOwner{r.Owner, r.Flock}
	for {
		m.mu.Lock()
		f := m.file(r.Key)
		own := f.owners[me]
		if _, busy := f.conflict(r); busy && r.Type != Unlock {
			changed := f.changed
			m.mu.Unlock()
			if !wait {
				return len(own.ranges) > 0, ErrConflict
			}
			select {
			case <-ctx.Done():
				return len(own.ranges) > 0, ctx.Err()
			case <-changed:
				continue
			}
		}
		next := Apply(own.ranges, r.Range)
		m.store(r, f, me, next)
		m.mu.Unlock()
		return len(next) > 0, nil
	}
}

// store sets me's ranges and wakes the file's waiters; m.mu held.
func (m *Memory) store(r Request, f *memFile, me memOwner, next []Range) {
	if len(next) > 0 {
		f.owners[me] = memEntry{pid: r.Pid, ranges: next}
	} else {
		delete(f.owners, me)
	}
	close(f.changed)
	f.changed = make(chan struct{})
	if len(f.owners) == 0 {
		delete(m.files, r.Key) // a waiter holds the old channel, closed above
	}
}
