package etcdtest

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Cluster is several etcd members of one cluster, each on its own free
// ports in its own temporary directory.
type Cluster struct {
	Members []*Server
}

// StartCluster starts an etcd cluster of n members for t and kills them
// at t's cleanup. Without the binary the test is skipped, or fails
// under CI=true.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	bin := etcdBin(t)
	return retry(t, func() (*Cluster, error) { return startCluster(t, bin, n) })
}

func startCluster(t testing.TB, bin string, n int) (*Cluster, error) {
	c := &Cluster{}
	var initial []string
	peers := make([]string, n)
	for i := range n {
		peers[i] = freePort(t)
		initial = append(initial, fmt.Sprintf("m%d=http://%s", i, peers[i]))
	}
	token := filepath.Base(t.TempDir())
	for i := range n {
		dir := t.TempDir()
		client := freePort(t)
		s := &Server{URL: "http://" + client, bin: bin, log: filepath.Join(dir, "log")}
		s.args = []string{"--name", fmt.Sprintf("m%d", i), "--data-dir", filepath.Join(dir, "data"),
			"--listen-client-urls", s.URL, "--advertise-client-urls", s.URL,
			"--listen-peer-urls", "http://" + peers[i], "--initial-advertise-peer-urls", "http://" + peers[i],
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", token, "--logger", "zap", "--log-outputs", s.log}
		t.Cleanup(func() {
			if s.cmd != nil {
				s.Kill()
			}
		})
		c.Members = append(c.Members, s)
	}
	for _, s := range c.Members {
		if err := s.launch(); err != nil {
			c.kill()
			return nil, err
		}
	}
	for _, s := range c.Members {
		if err := s.waitReady(); err != nil {
			c.kill()
			return nil, err
		}
	}
	return c, nil
}

func (c *Cluster) kill() {
	for _, s := range c.Members {
		if s.cmd != nil {
			s.Kill()
		}
	}
}

// Endpoints are the members' client URLs.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, s := range c.Members {
		eps = append(eps, s.URL)
	}
	return eps
}

// Leader is the member that the members still running say leads, or
// an error if they do not agree on one within a few seconds.
func (c *Cluster) Leader() (*Server, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, err := c.leader()
		if err == nil || time.Now().After(deadline) {
			return s, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *Cluster) leader() (*Server, error) {
	var leader uint64
	byID := map[uint64]*Server{}
	for _, s := range c.Members {
		if s.exited() {
			continue
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{s.URL}, DialTimeout: 2 * time.Second})
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := cli.Status(ctx, s.URL)
		cancel()
		cli.Close()
		if err != nil {
			return nil, fmt.Errorf("status of %s: %w", s.URL, err)
		}
		if st.Leader == 0 || leader != 0 && st.Leader != leader {
			return nil, fmt.Errorf("no leader agreed on (%s says %x, others %x)", s.URL, st.Leader, leader)
		}
		leader = st.Leader
		byID[st.Header.MemberId] = s
	}
	if s := byID[leader]; s != nil {
		return s, nil
	}
	return nil, fmt.Errorf("leader %x is not a running member", leader)
}
