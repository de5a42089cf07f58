package lockmgr

import (
	"context"
	"hash/fnv"
)

// Key names one lock. ID is the logical file within one daemon (the
// in-process manager's key); Name is the same file for every daemon of
// a cluster (its path below BACKING), used by cluster backends.
type Key struct {
	ID   uint64
	Name string
}

// Backend is what the commit path locks through: the in-process
// Manager (Local) or a cluster backend built on it.
type Backend interface {
	// Lock takes every key, with Manager.LockTagged's rules (FIFO,
	// Timeout, MaxWaiters); tag is reported by Snapshot.
	Lock(ctx context.Context, tag any, keys ...Key) (Held, error)
	// Snapshot lists the keys this daemon holds or waits for.
	Snapshot() []KeyInfo
}

// Held is a successful Lock.
type Held interface {
	// Check is cheap: nil while this daemon still holds the keys.
	Check() error
	// Fence is called immediately before a commit publishes: nil if the
	// grant is sure to last past the publishing step. Cluster backends
	// ask the lock service and record version (if not "") as what name
	// now is, for Version; the local one is Check.
	Fence(name, version string) error
	// Version is what the last Fence of name recorded, read when the
	// lock was taken ("" for none, and always for the local backend).
	Version(name string) string
	// Token is the fencing token: larger for every later grant of a key
	// (a cluster backend's lock key revision).
	Token() int64
	// Lease is the lock service's lease the grant lives by (0: none, as
	// for the local backend); script locks taken under another lease
	// ended with it.
	Lease() int64
	Release()
}

// Local serves Lock from m alone: one daemon, not clustered.
func Local(m *Manager) Backend { return local{m} }

type local struct{ m *Manager }

func (l local) Lock(ctx context.Context, tag any, keys ...Key) (Held, error) {
	g, err := l.m.LockTagged(ctx, tag, IDs(keys)...)
	if err != nil {
		return nil, err
	}
	return localHeld{g}, nil
}

func (l local) Snapshot() []KeyInfo { return l.m.Snapshot() }

type localHeld struct{ *Grant }

func (g localHeld) Fence(string, string) error { return g.Check() }
func (g localHeld) Version(string) string      { return "" }
func (g localHeld) Token() int64               { return int64(g.Grant.Token()) }
func (g localHeld) Lease() int64               { return 0 }

// IDs are the keys' IDs, for the in-process manager.
func IDs(keys []Key) []uint64 {
	out := make([]uint64, len(keys))
	for i, k := range keys {
		out[i] = k.ID
	}
	return out
}

// NameID is the local lock ID of a key name: its hash with the top bit
// set, which no ID has (inode numbers and safefs's synthetic ones are
// below 2^63); a collision only serializes two keys.
func NameID(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64() | 1<<63
}
