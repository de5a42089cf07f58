package etcdlock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safefs/safefs/internal/etcdretry"
	"github.com/safefs/safefs/scriptlock"
)

// Table keeps script locks in etcd, one key per (file, node, owner):
// PREFIX locks/PATH \0 NODE \0 KIND OWNER, with the node's lease
// attached, so that a daemon's death (its lease expiring) releases its
// locks. Owners are qualified by node: two hosts' owners never match.
type Table struct {
	cli     *clientv3.Client
	prefix  string
	lease   atomic.Int64 // clientv3.LeaseID
	node    string
	timeout time.Duration // one read or write, retried while etcd cannot answer; beyond: scriptlock.ErrUnavailable
	recheck time.Duration // a wait reads the table again at least this often
}

// callTimeout bounds one request; one without an answer is made again
// (to another member, or after an election) until the table's timeout.
const callTimeout = time.Second

// NewEtcd returns a table under prefix (such as /safefs/NAME/) whose
// locks carry lease, for node. A read or write etcd cannot answer is
// tried again for up to timeout (the daemon's lock_timeout).
func NewEtcd(cli *clientv3.Client, prefix string, lease clientv3.LeaseID, node string, timeout time.Duration) *Table {
	t := &Table{cli: cli, prefix: prefix, node: node, timeout: timeout, recheck: 2 * time.Second}
	t.lease.Store(int64(lease))
	return t
}

// SetLease attaches the locks taken from now on to lease: the node's
// previous lease ended (and etcd removed the locks it carried).
func (t *Table) SetLease(lease clientv3.LeaseID) { t.lease.Store(int64(lease)) }

// Lease is the lease locks taken now carry.
func (t *Table) Lease() int64 { return t.lease.Load() }

var _ scriptlock.Locker = (*Table)(nil)

// entry is one owner's locks on one file, as stored.
type entry struct {
	Pid    uint32             `json:"pid"`
	Ranges []scriptlock.Range `json:"ranges"`
}

func (t *Table) fileKey(path string) string { return t.prefix + "locks/" + path + "\x00" }

func ownerPart(r scriptlock.Request) string {
	kind := "p"
	if r.Flock {
		kind = "f"
	}
	return fmt.Sprintf("%s%016x", kind, r.Owner)
}

func (t *Table) ownKey(r scriptlock.Request) string {
	return t.fileKey(r.Key) + t.node + "\x00" + ownerPart(r)
}

// file is what the table holds for one file, read at rev.
type file struct {
	rev    int64
	own    []scriptlock.Range
	others []scriptlock.Held
}

// do runs one request, made again while etcd cannot answer it, until
// the table's timeout or ctx ends.
func (t *Table) do(ctx context.Context, call func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	return etcdretry.Do(ctx, min(callTimeout, t.timeout), call)
}

// failed is a request's failure: the caller's ctx's end (an interrupted
// wait) as is, anything else ErrUnavailable.
func failed(ctx context.Context, err error) error {
	if ctx.Err() != nil && !errors.Is(err, etcdretry.ErrNoAnswer) {
		return ctx.Err()
	}
	return fmt.Errorf("%w: %v", scriptlock.ErrUnavailable, err)
}

func (t *Table) read(ctx context.Context, r scriptlock.Request) (file, error) {
	var resp *clientv3.GetResponse
	err := t.do(ctx, func(ctx context.Context) (err error) {
		resp, err = t.cli.Get(ctx, t.fileKey(r.Key), clientv3.WithPrefix())
		return err
	})
	if err != nil {
		return file{}, failed(ctx, err)
	}
	f := file{rev: resp.Header.Revision}
	own, kind := t.ownKey(r), ownerPart(r)[:1]
	for _, kv := range resp.Kvs {
		k := string(kv.Key)
		var e entry
		if err := json.Unmarshal(kv.Value, &e); err != nil {
			return file{}, fmt.Errorf("%w: key %q: %v", scriptlock.ErrUnavailable, k, err)
		}
		switch {
		case k == own:
			f.own = e.Ranges
		case t.sameKind(k, kind):
			pid := e.Pid
			if !strings.HasPrefix(k[len(t.fileKey(r.Key)):], t.node+"\x00") {
				pid = 0
			}
			for _, rg := range e.Ranges {
				f.others = append(f.others, scriptlock.Held{Pid: pid, Range: rg})
			}
		}
	}
	return f, nil
}

// sameKind: flock and fcntl locks do not see each other, as on Linux.
func (t *Table) sameKind(key, kind string) bool {
	i := strings.LastIndexByte(key, 0)
	return i >= 0 && strings.HasPrefix(key[i+1:], kind)
}

func (f file) conflict(req scriptlock.Range) (scriptlock.Held, bool) {
	for _, o := range f.others {
		if o.Conflicts(req) {
			return o, true
		}
	}
	return scriptlock.Held{}, false
}

// Get returns a lock of another owner that conflicts with r.
func (t *Table) Get(ctx context.Context, r scriptlock.Request) (scriptlock.Held, bool, error) {
	f, err := t.read(ctx, r)
	if err != nil {
		return scriptlock.Held{}, false, err
	}
	h, ok := f.conflict(r.Range)
	return h, ok, nil
}

// Set applies r: see Locker. A write is made only if no key of the file
// changed since it was read (a lock released meanwhile changes nothing
// for the decision), else it is decided again.
func (t *Table) Set(ctx context.Context, r scriptlock.Request, wait bool) (bool, error) {
	for {
		f, err := t.read(ctx, r)
		if err != nil {
			return false, err
		}
		if r.Type != scriptlock.Unlock {
			if _, ok := f.conflict(r.Range); ok {
				if !wait {
					return len(f.own) > 0, scriptlock.ErrConflict
				}
				if err := t.waitChange(ctx, r.Key, f.rev); err != nil {
					return len(f.own) > 0, err
				}
				continue
			}
		}
		next := scriptlock.Apply(f.own, r.Range)
		ok, err := t.write(ctx, r, next, f.rev)
		if err != nil {
			return len(f.own) > 0, err
		}
		if ok {
			return len(next) > 0, nil
		}
	}
}

// write makes r's owner hold next if no key of the file changed since
// rev. A retry after a try whose answer was lost fails the condition
// (that try changed the file): Set reads again and decides again.
func (t *Table) write(ctx context.Context, r scriptlock.Request, next []scriptlock.Range, rev int64) (bool, error) {
	unchanged := clientv3.Compare(clientv3.ModRevision(t.fileKey(r.Key)).WithPrefix(), "<", rev+1)
	op := clientv3.OpDelete(t.ownKey(r))
	if len(next) > 0 {
		v, err := json.Marshal(entry{Pid: r.Pid, Ranges: next})
		if err != nil {
			return false, err
		}
		op = clientv3.OpPut(t.ownKey(r), string(v), clientv3.WithLease(clientv3.LeaseID(t.lease.Load())))
	}
	var resp *clientv3.TxnResponse
	err := t.do(ctx, func(ctx context.Context) (err error) {
		resp, err = t.cli.Txn(ctx).If(unchanged).Then(op).Commit()
		return err
	})
	if err != nil {
		return false, failed(ctx, err)
	}
	return resp.Succeeded, nil
}

// waitChange returns when a key of the file changed after rev, or after
// recheck (the caller reads again: a table gone unreachable is then
// noticed), or ctx's error when ctx ends first.
func (t *Table) waitChange(ctx context.Context, path string, rev int64) error {
	wctx, cancel := context.WithTimeout(ctx, t.recheck)
	defer cancel()
	ch := t.cli.Watch(clientv3.WithRequireLeader(wctx), t.fileKey(path), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case resp, ok := <-ch:
			if !ok || resp.Err() != nil || len(resp.Events) > 0 {
				return ctx.Err()
			}
		}
	}
}
