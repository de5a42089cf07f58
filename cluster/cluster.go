// Package cluster connects a safefs daemon to etcd: one client and one
// lease (a concurrency.Session kept alive) per daemon, under the key
// prefix /safefs/NAME/. Commit locks (locks.go) and script locks build
// on Client, Session and Prefix.
package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/safefs/safefs/internal/etcdretry"
	"github.com/safefs/safefs/lockmgr"
)

var (
	// ErrUnavailable: etcd could not be reached in time (lockmgr's, so
	// that fs tells it without importing etcd).
	ErrUnavailable = lockmgr.ErrUnavailable
	// ErrFenced: the daemon's lease expired (or has too little time
	// left) before a commit published.
	ErrFenced = lockmgr.ErrFenced
	// ErrRefused: etcd answered but refused this daemon: wrong user or
	// password, no user where etcd wants one, or no permission on the
	// cluster's keys. Retrying does not help.
	ErrRefused = errors.New("cluster: etcd refused the credentials")
)

// DefaultLeaseTTL is lease_ttl's default.
const DefaultLeaseTTL = 10 * time.Second

// callTimeout bounds one etcd request: one that gets no answer in time
// is made again (to another member, or after an election) until the
// operation's bound, Config.RetryFor.
const callTimeout = time.Second

// DefaultRetryFor is RetryFor's default: lock_timeout's.
const DefaultRetryFor = 10 * time.Second

// Config says which cluster a daemon joins and as whom.
type Config struct {
	Endpoints []string
	Name      string // key prefix /safefs/NAME/
	Node      string // this daemon's name in the cluster
	LeaseTTL  time.Duration
	TLS       *tls.Config // nil: plain text (http:// endpoints)
	Username  string      // "": no etcd authentication
	Password  string      // dropped once connected: Config() never shows it
	// RetryFor bounds how long an operation (a commit's fencing, an
	// unlock, a read of a published version) retries etcd requests
	// that get no answer; lock waits are bounded by their own context.
	RetryFor time.Duration
}

// Conn is a daemon's connection: the client and its current session.
type Conn struct {
	cfg    Config
	ttl    int // seconds
	client *clientv3.Client
	log    *zap.Logger

	mu   sync.Mutex
	sess *concurrency.Session
	// sure is until when (unix ns) the lease of sureOf is known to live,
	// from the last renewal this daemon saw answered.
	sure   int64
	sureOf clientv3.LeaseID
}

// Connect dials etcd and starts a lease kept alive in the background.
// It fails (ErrUnavailable) if etcd does not answer within ctx or a few
// seconds, so a mount with etcd down is refused rather than served
// without cluster locks, and ErrRefused if etcd refuses the user or its
// use of /safefs/NAME/.
func Connect(ctx context.Context, cfg Config, log *zap.Logger) (*Conn, error) {
	if len(cfg.Endpoints) == 0 || cfg.Name == "" || cfg.Node == "" {
		return nil, errors.New("cluster: endpoints, name and node are required")
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.RetryFor <= 0 {
		cfg.RetryFor = DefaultRetryFor
	}
	if log == nil {
		log = zap.NewNop()
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.Endpoints, DialTimeout: 3 * time.Second,
		TLS: cfg.TLS, Username: cfg.Username, Password: cfg.Password,
		Logger: log.Named("etcd").WithOptions(zap.IncreaseLevel(zap.ErrorLevel)),
		// Reconnect within a second of etcd's return (gRPC's default
		// backoff grows to two minutes): commits resume at once.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second})}})
	if err != nil {
		return nil, cfg.explain(classify(err))
	}
	cfg.Password = ""
	c := &Conn{cfg: cfg, ttl: int(math.Ceil(cfg.LeaseTTL.Seconds())), client: cli, log: log}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := c.newSession(ctx)
	if err != nil {
		cli.Close()
		return nil, cfg.explain(classify(err))
	}
	c.sess = s
	if err := c.mayUse(ctx); err != nil {
		c.Close()
		return nil, classify(err)
	}
	return c, nil
}

// mayUse checks that this daemon may read and write its cluster's keys,
// so that a user without the permission is refused at mount rather than
// at every commit. The transaction's condition is never true: etcd
// checks the permissions of both branches and writes nothing.
func (c *Conn) mayUse(ctx context.Context) error {
	never := clientv3.Compare(clientv3.Version(c.Prefix()), "<", 0)
	_, err := c.client.Txn(ctx).If(never).
		Then(clientv3.OpPut(c.Prefix(), "")).
		Else(clientv3.OpGet(c.Prefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())).Commit()
	return err
}

// classify tells a refusal by etcd (ErrRefused) from etcd not answering
// (ErrUnavailable).
func classify(err error) error {
	switch rpctypes.Error(err) {
	case rpctypes.ErrAuthFailed, rpctypes.ErrPermissionDenied, rpctypes.ErrUserEmpty,
		rpctypes.ErrInvalidAuthToken, rpctypes.ErrAuthOldRevision:
		return fmt.Errorf("%w: %v", ErrRefused, err)
	}
	return fmt.Errorf("%w: %v", ErrUnavailable, err)
}

// explain adds to ErrUnavailable over TLS what a handshake with the
// first endpoint says: gRPC only says that it could not connect.
func (cfg Config) explain(err error) error {
	if cfg.TLS == nil || !errors.Is(err, ErrUnavailable) {
		return err
	}
	if p := tlsProblem(cfg.Endpoints[0], cfg.TLS); p != nil {
		return fmt.Errorf("%w (TLS with %s: %v)", err, cfg.Endpoints[0], p)
	}
	return err
}

// tlsProblem is the error of a TLS handshake with ep, or nil. A refused
// client certificate shows only at the first read (TLS 1.3); a read that
// times out or gets data means the handshake was fine.
func tlsProblem(ep string, cfg *tls.Config) error {
	u, err := url.Parse(ep)
	if err != nil || u.Scheme != "https" {
		return nil
	}
	c := cfg.Clone()
	if c.ServerName == "" {
		c.ServerName = u.Hostname()
	}
	c.NextProtos = []string{"h2"}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", u.Host, c)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	_, err = conn.Read(make([]byte, 1))
	var ne net.Error
	if err == nil || errors.As(err, &ne) && ne.Timeout() {
		return nil
	}
	return err
}

// Client is the etcd client.
func (c *Conn) Client() *clientv3.Client { return c.client }

// Prefix is /safefs/NAME/: every key of this cluster is below it.
func (c *Conn) Prefix() string { return "/safefs/" + c.cfg.Name + "/" }

// Config is what the daemon connected with.
func (c *Conn) Config() Config { return c.cfg }

// Name, Node and LeaseTTL are the cluster's name, this daemon's node
// name and its lease's TTL (fs.Cluster).
func (c *Conn) Name() string { return c.cfg.Name }

func (c *Conn) Node() string { return c.cfg.Node }

func (c *Conn) LeaseTTL() time.Duration { return c.cfg.LeaseTTL }

// Session is the current session; it may have expired (Done closed):
// a new one is made at the next commit that finds it so.
func (c *Conn) Session() *concurrency.Session {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sess
}

// Live returns a live session, making a new lease if the last one
// expired: for script locks, whose keys carry the lease.
func (c *Conn) Live(ctx context.Context) (*concurrency.Session, error) { return c.session(ctx) }

// session returns a live session, making a new lease if the last one
// expired (the daemon was paused or cut off longer than the TTL).
func (c *Conn) session(ctx context.Context) (*concurrency.Session, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess != nil {
		select {
		case <-c.sess.Done():
			c.log.Warn("cluster: lease expired, starting a new one", zap.Int64("lease", int64(c.sess.Lease())))
			c.sess = nil
		default:
			return c.sess, nil
		}
	}
	s, err := c.newSession(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	c.sess = s
	return s, nil
}

// newSession grants a lease and keeps it alive; errors are etcd's own.
func (c *Conn) newSession(ctx context.Context) (*concurrency.Session, error) {
	var g *clientv3.LeaseGrantResponse
	err := c.retry(ctx, func(ctx context.Context) (err error) {
		g, err = c.client.Grant(ctx, int64(c.ttl))
		return err
	})
	if err != nil {
		return nil, err
	}
	return concurrency.NewSession(c.client, concurrency.WithLease(g.ID), concurrency.WithTTL(c.ttl))
}

// retry makes call's request again while etcd cannot answer it (see
// etcdretry), until ctx ends.
func (c *Conn) retry(ctx context.Context, call func(context.Context) error) error {
	return etcdretry.Do(ctx, callTimeout, call)
}

// bounded is a context for one operation outside a lock wait.
func (c *Conn) bounded() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), c.cfg.RetryFor)
}

// alive renews s's lease once and returns until when it is sure to
// live: the server renewed it after the request was sent, so it lives
// at least TTL from then. ErrFenced if the lease is gone, else etcd's
// own error (for etcdretry to judge).
func (c *Conn) alive(ctx context.Context, s *concurrency.Session) (time.Time, error) {
	sent := time.Now()
	resp, err := c.client.KeepAliveOnce(ctx, s.Lease())
	if err != nil {
		if isLeaseGone(err) {
			return time.Time{}, ErrFenced
		}
		return time.Time{}, err
	}
	if resp.TTL <= 0 {
		return time.Time{}, ErrFenced
	}
	until := sent.Add(time.Duration(resp.TTL) * time.Second)
	c.mu.Lock()
	if c.sureOf != s.Lease() || c.sure < until.UnixNano() {
		c.sure, c.sureOf = until.UnixNano(), s.Lease()
	}
	c.mu.Unlock()
	return until, nil
}

// margin is how long a lease must still be sure to live when a commit
// publishes: half the TTL, for clock rates and the publishing step.
func (c *Conn) margin() time.Duration { return c.cfg.LeaseTTL / 2 }

// lostIfPast: etcd did not answer, so the lease's fate is unknown; past
// the time it was last known to live (less the margin), the lock must
// count as lost (ErrFenced), before it, etcd is just unreachable.
func (c *Conn) lostIfPast(s *concurrency.Session, err error, margin time.Duration) error {
	c.mu.Lock()
	sure := c.sure
	if c.sureOf != s.Lease() {
		sure = 0
	}
	c.mu.Unlock()
	if time.Now().Add(margin).UnixNano() >= sure {
		return fmt.Errorf("%w (%v)", ErrFenced, err)
	}
	return err
}

// abandon stops renewing s's lease (its keys go when it expires) and
// makes the next commit start a new session.
func (c *Conn) abandon(s *concurrency.Session) {
	c.mu.Lock()
	if c.sess == s {
		c.sess = nil
	}
	c.mu.Unlock()
	c.log.Warn("cluster: a lock could not be released in etcd; its lease is given up and expires within the TTL",
		zap.Int64("lease", int64(s.Lease())))
	go s.Orphan()
}

// Close revokes the lease (so this daemon's locks go at once) and
// closes the client.
func (c *Conn) Close() error {
	c.mu.Lock()
	s := c.sess
	c.sess = nil
	c.mu.Unlock()
	if s != nil {
		_ = s.Close()
	}
	return c.client.Close()
}

func isLeaseGone(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound)
}
