package main

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/safefs/safefs/cluster"
	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/scriptlock/etcdlock"
)

// startScriptLocks makes flock and fcntl locks taken through the mount
// be decided in etcd when the daemon is in a cluster (conn not nil), so
// that they exclude across hosts. The keys carry the daemon's lease: its
// locks end when it dies. stop ends the lease watch. Outside a cluster
// fs.Mount has them decided in the daemon's memory (or, locks=kernel,
// by the kernel).
func startScriptLocks(conn *cluster.Conn, opts *fs.Options, log *zap.Logger) (stop func()) {
	if conn == nil {
		return func() {} // fs.Mount gives the daemon its own table, unless KernelLocks
	}
	sess := conn.Session()
	table := etcdlock.NewEtcd(conn.Client(), conn.Prefix(), sess.Lease(), conn.Config().Node, conn.Config().RetryFor)
	opts.ScriptLocks = table
	done := make(chan struct{})
	go renewLease(conn, table, done, log)
	return func() { close(done) }
}

// renewLease gives the lock table the new lease when the old one ends
// (etcd let it expire: unreachable or paused past lease_ttl). The locks
// the old lease carried are gone; lock requests fail with ENOLCK until
// then.
func renewLease(conn *cluster.Conn, table *etcdlock.Table, done chan struct{}, log *zap.Logger) {
	for {
		select {
		case <-done:
			return
		case <-conn.Session().Done():
		}
		log.Error("etcd lease lost: locks held through this daemon are gone; lock requests fail with ENOLCK until a new lease")
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			s, err := conn.Live(ctx)
			cancel()
			if err == nil {
				table.SetLease(s.Lease())
				log.Info("etcd lease renewed: script locks work again", zap.Int64("lease", int64(s.Lease())))
				break
			}
			select {
			case <-done:
				return
			case <-time.After(time.Second):
			}
		}
	}
}
