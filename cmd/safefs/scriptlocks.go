package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/scriptlock"
)

// scriptLockConfig: flock and fcntl locks decided in etcd, so that they
// exclude across hosts (script_locks=etcd). Until the cluster options
// land, these are how a mount is given an etcd.
type scriptLockConfig struct {
	on        bool
	endpoints []string
	name      string // key prefix /safefs/NAME/
	ttl       time.Duration
	node      string // "": host name and pid
}

var clusterNameRe = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

func init() {
	mountOptions = append(mountOptions,
		mountOption{name: "script_locks", value: "kernel|etcd", help: "who decides flock and fcntl locks: the kernel (this host only) or etcd (across hosts; needs etcd=)",
			show: func(c mountConfig) string { return map[bool]string{false: "kernel", true: "etcd"}[c.locks.on] },
			set:  setScriptLocks},
		mountOption{name: "etcd", value: "URL[+URL...]", help: "etcd endpoints for script_locks=etcd",
			show: func(c mountConfig) string { return orNone(strings.Join(c.locks.endpoints, "+")) },
			set:  setEtcd},
		mountOption{name: "cluster_name", value: "NAME", help: "key prefix /safefs/NAME/ shared by the daemons of one backing directory",
			show: func(c mountConfig) string { return c.locks.name },
			set:  setClusterName},
		mountOption{name: "lease_ttl", value: "DURATION", help: "etcd lease of this daemon: its locks end this long after it dies (>= 2s)",
			show: func(c mountConfig) string { return c.locks.ttl.String() },
			set:  setLeaseTTL},
		mountOption{name: "node", value: "NAME", help: "this daemon's name in etcd (default: host name and pid)",
			show: func(c mountConfig) string { return orNone(c.locks.node) },
			set:  func(c *mountConfig, v string) error { c.locks.node = v; return nil }},
	)
}

func setScriptLocks(c *mountConfig, v string) error {
	switch v {
	case "kernel":
		c.locks.on = false
	case "etcd":
		c.locks.on = true
	default:
		return errors.New("want kernel or etcd")
	}
	return nil
}

func setEtcd(c *mountConfig, v string) error {
	var eps []string
	for _, e := range strings.Split(v, "+") {
		if !strings.HasPrefix(e, "http://") && !strings.HasPrefix(e, "https://") {
			return errors.New("want URLs such as http://10.0.0.1:2379, joined with +")
		}
		eps = append(eps, e)
	}
	c.locks.endpoints = eps
	return nil
}

func setClusterName(c *mountConfig, v string) error {
	if !clusterNameRe.MatchString(v) {
		return errors.New("want letters, digits, '.', '_' or '-'")
	}
	c.locks.name = v
	return nil
}

func setLeaseTTL(c *mountConfig, v string) error {
	d, err := time.ParseDuration(v)
	if err != nil || d < 2*time.Second {
		return errors.New("want a Go duration >= 2s, such as 10s")
	}
	c.locks.ttl = d
	return nil
}

// checkScriptLocks refuses script_locks=etcd without endpoints (usage).
func checkScriptLocks(c scriptLockConfig) error {
	if c.on && len(c.endpoints) == 0 {
		return failf(exitUsage, "script_locks=etcd needs etcd=URL")
	}
	return nil
}

// startScriptLocks connects to etcd and sets opts.ScriptLocks; stop
// revokes the lease (this daemon's locks end at once) and disconnects.
func startScriptLocks(c scriptLockConfig, opts *fs.Options, log *zap.Logger) (stop func(), err error) {
	if !c.on {
		return func() {}, nil
	}
	if err := checkScriptLocks(c); err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.endpoints, DialTimeout: 5 * time.Second,
		Logger: log.Named("etcd")})
	if err != nil {
		return nil, failf(exitMount, "etcd: %v", err)
	}
	sess, err := newSession(cli, c.ttl)
	if err != nil {
		cli.Close()
		return nil, failf(exitMount, "etcd %s unreachable: %v", strings.Join(c.endpoints, "+"), err)
	}
	node := c.node
	if node == "" {
		host, _ := os.Hostname()
		node = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	table := scriptlock.NewEtcd(cli, "/safefs/"+c.name+"/", sess.Lease(), node)
	opts.ScriptLocks = table
	log.Info("script locks in etcd", zap.Strings("etcd", c.endpoints), zap.String("cluster_name", c.name),
		zap.String("node", node), zap.Duration("lease_ttl", c.ttl))
	done := make(chan struct{})
	cur := make(chan *concurrency.Session, 1)
	cur <- sess
	go renewLease(cli, c.ttl, table, sess, cur, done, log)
	return func() {
		close(done)
		(<-cur).Close() // revokes the lease: this daemon's locks end now
		cli.Close()
	}, nil
}

// renewLease gets the node a new lease when its session ends (etcd let
// the lease expire: unreachable or paused past lease_ttl). The locks the
// old lease carried are gone; lock requests fail with ENOLCK until then.
func renewLease(cli *clientv3.Client, ttl time.Duration, table *scriptlock.Table, sess *concurrency.Session,
	cur chan *concurrency.Session, done chan struct{}, log *zap.Logger) {
	for {
		select {
		case <-done:
			return
		case <-sess.Done():
		}
		log.Error("etcd lease lost: locks held through this daemon are gone; lock requests fail with ENOLCK until a new lease")
		<-cur
		for {
			next, err := newSession(cli, ttl)
			if err == nil {
				sess = next
				break
			}
			select {
			case <-done:
				cur <- sess
				return
			case <-time.After(time.Second):
			}
		}
		table.SetLease(sess.Lease())
		cur <- sess
		log.Info("etcd lease renewed: script locks work again", zap.Int64("lease", int64(sess.Lease())))
	}
}

// newSession grants a lease of ttl, within a bounded time, and keeps it
// alive.
func newSession(cli *clientv3.Client, ttl time.Duration) (*concurrency.Session, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := cli.Grant(ctx, int64(ttl/time.Second))
	if err != nil {
		return nil, err
	}
	return concurrency.NewSession(cli, concurrency.WithLease(l.ID), concurrency.WithTTL(int(ttl/time.Second)))
}
