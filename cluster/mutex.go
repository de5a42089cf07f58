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
)

// mutex is concurrency.Mutex's protocol (a key per waiter under the
// lock's prefix, bound to the session's lease, served in creation
// revision order), with what a commit needs that Mutex lacks: a wait
// that ends as soon as etcd stops answering (Mutex waits for its
// context, then deletes its key with no deadline at all, so an etcd
// that died mid-wait held the commit until it came back).
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
func (m *mutex) lock(ctx context.Context, reads []clientv3.Op) ([]*pb.ResponseOp, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go m.c.watchHealth(ctx, m.s, cancel)
	got, err := m.acquire(ctx, reads)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
			err = cause
		}
		m.unlock()
	}
	return got, err
}

func (m *mutex) acquire(ctx context.Context, reads []clientv3.Op) ([]*pb.ResponseOp, error) {
	cli := m.c.client
	owner := clientv3.OpGet(m.pfx, clientv3.WithFirstCreate()...)
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(m.key), "=", 0)).
		Then(append([]clientv3.Op{clientv3.OpPut(m.key, m.c.cfg.Node, clientv3.WithLease(m.s.Lease())), owner}, reads...)...).
		Else(append([]clientv3.Op{clientv3.OpGet(m.key), owner}, reads...)...).Commit()
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
	// Wait until every key created before ours is gone, one at a time.
	opts := append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(m.rev-1))
	for {
		g, err := cli.Get(ctx, m.pfx, opts...)
		if err != nil {
			return nil, unavailable(err)
		}
		if len(g.Kvs) == 0 {
			break
		}
		if err := waitDelete(ctx, cli, string(g.Kvs[0].Key), g.Header.Revision); err != nil {
			return nil, unavailable(err)
		}
	}
	// Our key must still be there: the lease may have expired meanwhile.
	g, err := cli.Get(ctx, m.key)
	if err != nil {
		return nil, unavailable(err)
	}
	if len(g.Kvs) == 0 || g.Kvs[0].CreateRevision != m.rev {
		return nil, ErrFenced
	}
	return nil, nil
}

func waitDelete(ctx context.Context, cli *clientv3.Client, key string, rev int64) error {
	wctx, cancel := context.WithCancel(ctx)
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

// unlock deletes the key within callTimeout, else gives the session up
// (its keys go with the lease, within the TTL) so that no key of ours
// outlives the lock once etcd is back.
func (m *mutex) unlock() {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if _, err := m.c.client.Delete(ctx, m.key); err != nil {
		m.c.abandon(m.s)
	}
}

// watchHealth renews s's lease every callTimeout while a lock wait
// runs; if etcd does not answer (or the lease is gone) it ends the wait
// with that cause, so a commit fails fast rather than at lock_timeout.
func (c *Conn) watchHealth(ctx context.Context, s *concurrency.Session, stop context.CancelCauseFunc) {
	t := time.NewTicker(callTimeout)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := c.alive(s); err != nil && ctx.Err() == nil {
				stop(err)
				return
			}
		}
	}
}
