// Package etcdtest starts a real etcd server (Debian's etcd-server) for
// tests, on free ports in a temporary directory.
package etcdtest

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Server is a running etcd.
type Server struct {
	URL  string
	bin  string
	args []string
	log  string
	cmd  *exec.Cmd
	done chan struct{} // closed when etcd has exited
	tls  *tls.Config   // how ready and Client connect; nil: http
}

// TLS makes etcd serve https: its certificate and key, and with
// ClientCertAuth it wants client certificates signed by TrustedCA.
// Client is what the test's own clients (readiness, Client) use.
type TLS struct {
	CertFile, KeyFile string
	TrustedCAFile     string
	ClientCertAuth    bool
	Client            *tls.Config
}

// Start starts etcd for t and stops it at t's cleanup. Without the
// binary the test is skipped, or fails under CI=true.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartTLS(t, nil)
}

// StartTLS is Start with https client URLs (peers stay http); nil is
// Start.
func StartTLS(t testing.TB, cfg *TLS) *Server {
	t.Helper()
	bin := etcdBin(t)
	return retry(t, func() (*Server, error) { return start(t, bin, cfg) })
}

// etcdBin is the etcd binary's path. Without it the test is skipped, or
// fails under CI=true.
func etcdBin(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("etcd not installed (apt-get install etcd-server)")
		}
		t.Skip("etcd not installed (apt-get install etcd-server)")
	}
	return bin
}

// retry starts etcd up to three times: a free port found may be taken
// by another process before etcd binds it.
func retry[T any](t testing.TB, start func() (T, error)) T {
	t.Helper()
	for try := 0; ; try++ {
		v, err := start()
		if err == nil || try == 2 {
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
}

func start(t testing.TB, bin string, cfg *TLS) (*Server, error) {
	dir := t.TempDir()
	client, peer := freePort(t), freePort(t)
	s := &Server{URL: "http://" + client, bin: bin, log: filepath.Join(dir, "log")}
	if cfg != nil {
		s.URL, s.tls = "https://"+client, cfg.Client
	}
	s.args = []string{"--name", "t", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", s.URL, "--advertise-client-urls", s.URL,
		"--listen-peer-urls", "http://" + peer, "--initial-advertise-peer-urls", "http://" + peer,
		"--initial-cluster", "t=http://" + peer, "--logger", "zap", "--log-outputs", s.log}
	if cfg != nil {
		s.args = append(s.args, "--cert-file", cfg.CertFile, "--key-file", cfg.KeyFile)
		if cfg.TrustedCAFile != "" {
			s.args = append(s.args, "--trusted-ca-file", cfg.TrustedCAFile)
		}
		if cfg.ClientCertAuth {
			s.args = append(s.args, "--client-cert-auth")
		}
	}
	t.Cleanup(func() {
		if s.cmd != nil {
			s.Kill()
		}
	})
	return s, s.run()
}

func (s *Server) run() error {
	if err := s.launch(); err != nil {
		return err
	}
	return s.waitReady()
}

// launch starts the etcd process without waiting for it to serve.
func (s *Server) launch() error {
	s.cmd = exec.Command(s.bin, s.args...)
	s.done = make(chan struct{})
	if err := s.cmd.Start(); err != nil {
		return err
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	return nil
}

// waitReady waits until s answers a read; if it does not, it is killed.
func (s *Server) waitReady() error {
	if err := s.ready(); err != nil {
		s.Kill()
		log, _ := os.ReadFile(s.log)
		return fmt.Errorf("etcd did not start: %v\n%s", err, log)
	}
	return nil
}

// Restart starts etcd again after Kill, on the same ports and data.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.run(); err != nil {
		t.Fatal(err)
	}
}

// Kill stops etcd (SIGKILL); again is a no-op.
func (s *Server) Kill() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

func (s *Server) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

func (s *Server) ready() error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{s.URL}, DialTimeout: 5 * time.Second, TLS: s.tls})
	if err != nil {
		return err
	}
	defer cli.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := cli.Get(ctx, "ready")
		cancel()
		if err == nil {
			return nil
		}
		if s.exited() || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Client returns a client of s (with StartTLS's Client config), closed
// at t's cleanup.
func (s *Server) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{s.URL}, DialTimeout: 5 * time.Second, TLS: s.tls})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func freePort(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
