package main

import (
	"context"
	"errors"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/safefs/safefs/cluster"
)

// clusterConfig is what the cluster options asked for.
type clusterConfig struct {
	mode      string // "" or "etcd"
	endpoints []string
	name      string
	node      string // "": the host name
	leaseTTL  time.Duration
	auth      etcdAuth
}

func defaultClusterConfig() clusterConfig {
	return clusterConfig{name: "default", leaseTTL: cluster.DefaultLeaseTTL}
}

func setClusterMode(c *mountConfig, v string) error {
	if v != "etcd" {
		return errors.New("want etcd")
	}
	c.cluster.mode = v
	return nil
}

// setEtcd: endpoints separated by '+' (a ',' would end the option).
func setEtcd(c *mountConfig, v string) error {
	var eps []string
	for _, e := range strings.Split(v, "+") {
		if e == "" {
			return errors.New("want URL[+URL...], such as http://10.0.0.1:2379+http://10.0.0.2:2379")
		}
		eps = append(eps, e)
	}
	c.cluster.endpoints = eps
	return nil
}

func setClusterName(c *mountConfig, v string) error {
	if v == "" || strings.ContainsAny(v, "/\x00") {
		return errors.New("want a name without '/'")
	}
	c.cluster.name = v
	return nil
}

func setNode(c *mountConfig, v string) error {
	if v == "" || v == "." || v == ".." || len(v) > 255 || strings.ContainsAny(v, "/\x00") {
		return errors.New("want a file name (no '/')")
	}
	c.cluster.node = v
	return nil
}

func setLeaseTTL(c *mountConfig, v string) error {
	d, err := time.ParseDuration(v)
	if err != nil || d < 2*time.Second {
		return errors.New("want a Go duration >= 2s (etcd's shortest lease)")
	}
	c.cluster.leaseTTL = d
	return nil
}

// check refuses cluster options that cannot work together and loads the
// TLS and password files, all before anything is mounted.
func (c *clusterConfig) check() error {
	if c.mode == "" && len(c.endpoints) > 0 {
		return failf(exitUsage, "option etcd needs cluster=etcd")
	}
	if c.mode == "" {
		if o := c.auth.given(); o != "" {
			return failf(exitUsage, "option %s needs cluster=etcd", o)
		}
		return nil
	}
	if len(c.endpoints) == 0 {
		return failf(exitUsage, "option cluster=etcd needs etcd=URL[+URL...]")
	}
	return c.auth.load(c.endpoints)
}

// connect joins the cluster before anything is mounted: with etcd down
// the mount is refused (exit 13) rather than served with local locks.
// Once mounted, requests etcd cannot answer are made again for up to
// retryFor (lock_timeout).
func (c clusterConfig) connect(log *zap.Logger, retryFor time.Duration) (*cluster.Conn, error) {
	if c.mode == "" {
		return nil, nil
	}
	node := c.node
	if node == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, failf(exitUsage, "no node=NAME and no host name: %v", err)
		}
		node = h
	}
	cfg := cluster.Config{Endpoints: c.endpoints, Name: c.name, Node: node, LeaseTTL: c.leaseTTL,
		TLS: c.auth.tls, Username: c.auth.user, Password: c.auth.password, RetryFor: retryFor}
	conn, err := cluster.Connect(context.Background(), cfg, log)
	eps := strings.Join(c.endpoints, "+")
	switch {
	case errors.Is(err, cluster.ErrRefused):
		return nil, failf(exitClusterRefused, "cluster: etcd at %s refused %s for /safefs/%s/, nothing is mounted: %v",
			eps, c.auth.who(), c.name, err)
	case err != nil:
		return nil, failf(exitCluster, "cluster: etcd at %s cannot be reached%s, nothing is mounted: %v",
			eps, c.auth.tlsHint(), err)
	}
	log.Info("cluster: joined", zap.String("cluster", c.name), zap.String("node", node),
		zap.Strings("etcd", c.endpoints), zap.Duration("lease_ttl", c.leaseTTL),
		zap.Bool("tls", c.auth.tls != nil), zap.String("etcd_user", c.auth.user))
	if c.auth.user != "" && c.auth.tls == nil {
		log.Warn("cluster: etcd_user over plain http: the password crosses the network in clear text")
	}
	return conn, nil
}
