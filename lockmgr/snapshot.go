package lockmgr

import (
	"cmp"
	"slices"
	"time"
)

// KeyInfo is one held key as Snapshot saw it.
type KeyInfo struct {
	Key     uint64
	Holder  uint64    // the grant's token, or the id of a Lock still taking other keys
	Tag     any       // the holder's LockTagged tag (nil for Lock)
	Since   time.Time // when the holder got the key
	Waiters []WaiterInfo
}

// WaiterInfo is one queued Lock call, in the order it will be served.
type WaiterInfo struct {
	ID    uint64 // the waiting call's id (not yet its token)
	Tag   any
	Since time.Time // when it started to wait for this key
}

// Snapshot lists the held keys in ascending order with their holder and
// waiters (FIFO), for diagnostics. It only takes the manager's mutex.
func (m *Manager) Snapshot() []KeyInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]KeyInfo, 0, len(m.keys))
	for k, ks := range m.keys {
		ki := KeyInfo{Key: k, Holder: ks.holder, Tag: ks.tag, Since: ks.since}
		for _, w := range ks.queue {
			ki.Waiters = append(ki.Waiters, WaiterInfo{ID: w.id, Tag: w.tag, Since: w.since})
		}
		out = append(out, ki)
	}
	slices.SortFunc(out, func(a, b KeyInfo) int { return cmp.Compare(a.Key, b.Key) })
	return out
}
