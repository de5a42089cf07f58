package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/safefs/safefs/internal/etcdretry"
	"github.com/safefs/safefs/lockmgr"
)

// Locks is the cluster's commit lock backend: m first (commits of one
// file within this daemon wait there, FIFO, bounded by max_waiters,
// and one session may hold an etcd mutex only once), then one etcd
// mutex per key Name (the path below BACKING, the same on every host),
// in name order so that two multi-key lockers cannot deadlock.
func (c *Conn) Locks(m *lockmgr.Manager) lockmgr.Backend { return &locks{c: c, m: m} }

type locks struct {
	c *Conn
	m *lockmgr.Manager
}

// Snapshot lists the IDs' keys only: each name key is held with them.
func (b *locks) Snapshot() []lockmgr.KeyInfo {
	var out []lockmgr.KeyInfo
	for _, k := range b.m.Snapshot() {
		if k.Key&(1<<63) == 0 {
			out = append(out, k)
		}
	}
	return out
}

func (b *locks) Lock(ctx context.Context, tag any, keys ...lockmgr.Key) (lockmgr.Held, error) {
	g, err := b.m.LockTagged(ctx, tag, localKeys(keys)...)
	if err != nil {
		return nil, err
	}
	h := &held{c: b.c, g: g, vers: map[string]string{}}
	if err := h.lock(ctx, names(keys)); err != nil {
		h.Release()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			return nil, lockmgr.ErrTimeout
		}
		return nil, err
	}
	return h, nil
}

// localKeys are the keys' IDs and their names, hashed: two logical
// files of this daemon can have one path (a name looked up again after
// another daemon's commit), and one session must not take one etcd
// mutex twice (lockmgr.NameID).
func localKeys(keys []lockmgr.Key) []uint64 {
	out := lockmgr.IDs(keys)
	for _, k := range keys {
		if k.Name != "" {
			out = append(out, lockmgr.NameID(k.Name))
		}
	}
	return out
}

func names(keys []lockmgr.Key) []string {
	var out []string
	for _, k := range keys {
		if k.Name != "" {
			out = append(out, k.Name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// keyPart escapes a path so that one file's keys are never a prefix
// range of another's (a mutex waits on every key below its prefix).
func keyPart(name string) string { return url.QueryEscape(name) }

func (c *Conn) lockKey(name string) string { return c.Prefix() + "lock/" + keyPart(name) }
func (c *Conn) verKey(name string) string  { return c.Prefix() + "ver/" + keyPart(name) }

// Published is what the last replace of name, by any daemon of the
// cluster, recorded: the inode it published and the one it replaced
// ("" if none). Read without the lock, for opens and stats.
func (c *Conn) Published(ctx context.Context, name string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RetryFor)
	defer cancel()
	var resp *clientv3.GetResponse
	err := c.retry(ctx, func(ctx context.Context) (err error) {
		resp, err = c.client.Get(ctx, c.verKey(name))
		return err
	})
	if err != nil {
		return "", unavailable(err)
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}

// held is one grant: the local one and the etcd mutexes of its names.
type held struct {
	c     *Conn
	g     *lockmgr.Grant
	s     *concurrency.Session
	mus   []*mutex
	token int64
	vers  map[string]string // ver keys read under the lock
	// until is when the lease is sure to end, from Fence's renewal:
	// from then on Check fails once fewer than margin is left.
	until time.Time
}

// lock takes the etcd mutexes. The names' published versions are read
// with the last mutex if it was free, else once all are held.
func (h *held) lock(ctx context.Context, nms []string) error {
	s, err := h.c.session(ctx)
	if err != nil {
		return err
	}
	h.s = s
	var reads []clientv3.Op
	for _, nm := range nms {
		reads = append(reads, clientv3.OpGet(h.c.verKey(nm)))
	}
	var got []*pb.ResponseOp
	for i, nm := range nms {
		mu := newMutex(h.c, s, nm)
		var rs []clientv3.Op
		if i == len(nms)-1 {
			rs = reads
		}
		if got, err = mu.lock(ctx, rs); err != nil {
			return err
		}
		h.mus = append(h.mus, mu)
		h.token = max(h.token, mu.rev)
	}
	if got == nil && len(reads) > 0 {
		if got, err = h.read(ctx, reads); err != nil {
			return err
		}
	}
	for i, r := range got {
		if kvs := r.GetResponseRange().Kvs; len(kvs) > 0 {
			h.vers[nms[i]] = string(kvs[0].Value)
		}
	}
	return nil
}

func (h *held) read(ctx context.Context, ops []clientv3.Op) ([]*pb.ResponseOp, error) {
	var resp *clientv3.TxnResponse
	err := h.c.retry(ctx, func(ctx context.Context) (err error) {
		resp, err = h.c.client.Txn(ctx).Then(ops...).Commit()
		return err
	})
	if err != nil {
		return nil, unavailable(err)
	}
	return resp.Responses, nil
}

// unavailable maps a failed request: the wait's own end passes as is
// (a lock wait that timed out), a lease gone is ErrFenced, anything
// else (etcdretry gave up: no answer within the bound) ErrUnavailable.
func unavailable(err error) error {
	switch {
	case errors.Is(err, ErrFenced):
		return err
	case isLeaseGone(err):
		return ErrFenced
	case errors.Is(err, etcdretry.ErrNoAnswer):
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return err
	}
	return fmt.Errorf("%w: %v", ErrUnavailable, err)
}

func (h *held) Check() error {
	if err := h.g.Check(); err != nil {
		return err
	}
	select {
	case <-h.s.Done():
		return ErrFenced
	default:
	}
	if !h.until.IsZero() && time.Until(h.until) < h.c.margin() {
		return ErrFenced
	}
	return nil
}

func (h *held) Token() int64 { return h.token }

func (h *held) Lease() int64 { return int64(h.s.Lease()) }

// Version is what the last commit of name published (see Fence), as
// read when the lock was taken; "" if none was recorded.
func (h *held) Version(name string) string { return h.vers[name] }

// Fence renews the lease and checks it will outlive the publishing
// step by a margin (half the TTL); then, in one transaction that holds
// only while every mutex is still ours, records version for name ("":
// nothing). The margin is checked again once the answer is in: a
// daemon paused while its request was on the way gets a late "yes"
// about a lock it may no longer hold. Requests etcd cannot answer (an
// election) are made again, renewal first, for up to RetryFor. Any
// check failing: ErrFenced; no answer within RetryFor: ErrUnavailable,
// or ErrFenced once the lease is no longer sure to live.
func (h *held) Fence(name, version string) error {
	h.until = time.Time{}
	if err := h.Check(); err != nil {
		return err
	}
	var cmps []clientv3.Cmp
	for _, mu := range h.mus {
		cmps = append(cmps, mu.isOwner())
	}
	var ops []clientv3.Op
	if name != "" && version != "" {
		ops = append(ops, clientv3.OpPut(h.c.verKey(name), version))
	}
	ctx, cancel := h.c.bounded()
	defer cancel()
	err := h.c.retry(ctx, func(ctx context.Context) error { return h.fenceOnce(ctx, cmps, ops) })
	switch {
	case err == nil:
		return h.Check()
	case isLeaseGone(err):
		return ErrFenced
	case errors.Is(err, ErrFenced), errors.Is(err, lockmgr.ErrLost):
		return err // a check failed
	}
	return h.c.lostIfPast(h.s, fmt.Errorf("%w: %v", ErrUnavailable, err), h.c.margin())
}

// fenceOnce is one try of Fence: renewal, margin, transaction. The
// transaction is the same on a retry (its condition holds or not
// whether or not an earlier try landed).
func (h *held) fenceOnce(ctx context.Context, cmps []clientv3.Cmp, ops []clientv3.Op) error {
	h.until = time.Time{} // an earlier try's renewal may be too old now
	if err := h.Check(); err != nil {
		return err // the session ended: the lease really expired
	}
	until, err := h.c.alive(ctx, h.s)
	if err != nil {
		return err
	}
	h.until = until
	if err := h.Check(); err != nil {
		return err
	}
	resp, err := h.c.client.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return ErrFenced
	}
	return nil
}

// Release deletes the mutex keys, then frees the local grant. A key
// that cannot be deleted (no answer within RetryFor) must not outlive this
// grant, as the session would keep it alive once etcd is back: the
// session is given up, so its keys go with its lease within the TTL,
// and the next commit starts a new one.
func (h *held) Release() {
	for _, mu := range h.mus {
		mu.unlock()
	}
	h.mus = nil
	h.g.Release()
}
