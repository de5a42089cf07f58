package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/safefs/safefs/internal/etcdretry"
)

// mutex is concurrency.Mutex's protocol (a key per waiter under the
// lock's prefix, bound to the session's lease, served in creation
// revision order), with what a commit needs that Mutex lacks: requests
// etcd cannot answer (an election) are made again until the wait's
// context ends, and the key is deleted within a bound (Mutex deletes it
// with no deadline at all, so an etcd that died mid-wait held the
// commit until it came back).
type mutex struct {
	c   *Conn
	s   *concurrency.Session
	pfx string // the lock's prefix, ending in "/"
	key string // this waiter's key
	rev int64  // its creation revision: the fencing token
}

func newMutex(c *Conn, s *concurrency.Session, name string) *mutex {
	pfx := c.lockKey(name) + "/"
	return &mutex{c: c, s: s, pfx: pfx, key: fmt.Sprintf("%s%x", pfx, s.Lease())}
}

// lock queues and waits for the lock; reads, in the request that
// queues, also run (their answers are returned if the lock was free,
// so what they read was written under an earlier holding; nil if it
// had to wait). On failure the key is removed (or, if etcd cannot be
// reached, the session is given up so the key goes with the lease).
// The wait ends early, ErrFenced, if the session's lease expires.
func (m *mutex) lock(ctx context.Context, reads []clientv3.Op) ([]*pb.ResponseOp, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go watchLease(ctx, m.s, cancel)
	got, err := m.acquire(ctx, reads)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
			err = cause
		}
		if errors.Is(err, ErrUnavailable) {
			// etcd answered nothing for the whole wait: a delete would
			// wait as long again before the same end.
			m.c.abandon(m.s)
		} else {
			m.unlock()
		}
	}
	return got, err
}

func (m *mutex) acquire(ctx context.Context, reads []clientv3.Op) ([]*pb.ResponseOp, error) {
	cli := m.c.client
	owner := clientv3.OpGet(m.pfx, clientv3.WithFirstCreate()...)
	// The same request on a retry: if an earlier try made the key, the
	// else branch reads it.
	var resp *clientv3.TxnResponse
	err := m.c.retry(ctx, func(ctx context.Context) (err error) {
		resp, err = cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(m.key), "=", 0)).
			Then(append([]clientv3.Op{clientv3.OpPut(m.key, m.c.cfg.Node, clientv3.WithLease(m.s.Lease())), owner}, reads...)...).
			Else(append([]clientv3.Op{clientv3.OpGet(m.key), owner}, reads...)...).Commit()
		return err
	})
	if err != nil {
		return nil, unavailable(err)
	}
	m.rev = resp.Header.Revision
	if !resp.Succeeded {
		m.rev = resp.Responses[0].GetResponseRange().Kvs[0].CreateRevision
	}
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) == 0 || kvs[0].CreateRevision == m.rev {
		return resp.Responses[2:], nil // free: ours at once
	}
	if err := m.waitTurn(ctx); err != nil {
		return nil, err
	}
	// Our key must still be there: the lease may have expired meanwhile.
	var g *clientv3.GetResponse
	err = m.c.retry(ctx, func(ctx context.Context) (err error) {
		g, err = cli.Get(ctx, m.key)
		return err
	})
	if err != nil {
		return nil, unavailable(err)
	}
	if len(g.Kvs) == 0 || g.Kvs[0].CreateRevision != m.rev {
		return nil, ErrFenced
	}
	return nil, nil
}

// waitTurn waits until every key created before ours is gone, one at a
// time. A watch that breaks (its member lost the leader, or is gone)
// is only a reason to look again.
func (m *mutex) waitTurn(ctx context.Context) error {
	opts := append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(m.rev-1))
	for {
		var g *clientv3.GetResponse
		err := m.c.retry(ctx, func(ctx context.Context) (err error) {
			g, err = m.c.client.Get(ctx, m.pfx, opts...)
			return err
		})
		if err != nil {
			return unavailable(err)
		}
		if len(g.Kvs) == 0 {
			return nil
		}
		if err := waitDelete(ctx, m.c.client, string(g.Kvs[0].Key), g.Header.Revision+1); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			pause(ctx, etcdretry.Backoff)
		}
	}
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// waitDelete returns nil once key is deleted (at rev or later: the
// revision after the read that saw it), else why the watch ended.
// Watching from a revision etcd has not reached yet puts the watch in
// its synced group, told at once; from one it has reached, etcd
// catches it up in a loop that runs every 100 ms, so each handoff of a
// lock between daemons waited 50 ms on average. The watch needs a
// leader, so that one on a member cut off from the others ends rather
// than waiting for nothing.
func waitDelete(ctx context.Context, cli *clientv3.Client, key string, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range cli.Watch(wctx, key, clientv3.WithRev(rev)) {
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE {
				return nil
			}
		}
		if err := wr.Err(); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.New("cluster: watch ended")
}

// isOwner holds in a transaction while this waiter's key is the one
// made at rev: the lock is still ours.
func (m *mutex) isOwner() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(m.key), "=", m.rev)
}

// unlock deletes the key, trying again for up to RetryFor while etcd
// cannot answer, else gives the session up (its keys go with the
// lease, within the TTL) so that no key of ours outlives the lock once
// etcd is back.
func (m *mutex) unlock() {
	ctx, cancel := m.c.bounded()
	defer cancel()
	err := m.c.retry(ctx, func(ctx context.Context) error {
		_, err := m.c.client.Delete(ctx, m.key)
		return err
	})
	if err != nil {
		m.c.abandon(m.s)
	}
}

// watchLease ends a lock wait (ErrFenced) when s's lease really
// expired: the session saw no renewal answered for its TTL, or etcd
// said the lease is gone. etcd merely not answering (an election) is
// not a reason: the wait goes on, bounded by its context.
func watchLease(ctx context.Context, s *concurrency.Session, stop context.CancelCauseFunc) {
	select {
	case <-ctx.Done():
	case <-s.Done():
		stop(fmt.Errorf("%w: the lease expired during the wait", ErrFenced))
	}
}
