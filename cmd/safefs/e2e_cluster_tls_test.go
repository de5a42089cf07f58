package main

// Cluster mode against an etcd that wants TLS, client certificates and
// a user with a password (etcd_cacert, etcd_cert, etcd_key, etcd_user,
// etcd_password_file): real etcd, real daemons.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safefs/safefs/scriptlock/etcdtest"
)

// testPKI is a CA with a server certificate for 127.0.0.1 and a client
// certificate, as PEM files in a temp dir.
type testPKI struct {
	dir                    string
	ca                     string // files
	server, serverKey      string
	client, clientKey      string
	caCert                 *x509.Certificate
	caPriv                 *ecdsa.PrivateKey
	serial                 int64
	clientTLS              *tls.Config // for the test's own etcd client
	otherCA                string      // a CA that signed none of them
	garbage, missing, aDir string
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	p := &testPKI{dir: t.TempDir()}
	p.caCert, p.caPriv = p.newCA(t, "ca")
	p.ca = p.path("ca.pem")
	p.server, p.serverKey = p.issue(t, "server", x509.ExtKeyUsageServerAuth)
	p.client, p.clientKey = p.issue(t, "client", x509.ExtKeyUsageClientAuth)
	p.newCA(t, "other")
	p.otherCA = p.path("other.pem")
	p.garbage, p.missing, p.aDir = p.path("garbage.pem"), p.path("missing.pem"), p.dir
	require.NoError(t, os.WriteFile(p.garbage, []byte("not a certificate\n"), 0o644))
	pair, err := tls.LoadX509KeyPair(p.client, p.clientKey)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	roots.AddCert(p.caCert)
	p.clientTLS = &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	return p
}

func (p *testPKI) path(name string) string { return filepath.Join(p.dir, name) }

// newCA writes NAME.pem and NAME-key.pem, a self-signed CA.
func (p *testPKI) newCA(t *testing.T, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key := newKey(t)
	tmpl := p.template(name)
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	p.write(t, name, der, key)
	return cert, key
}

// issue writes NAME.pem and NAME-key.pem, signed by the CA, valid for
// 127.0.0.1 and localhost.
func (p *testPKI) issue(t *testing.T, name string, usage x509.ExtKeyUsage) (string, string) {
	t.Helper()
	key := newKey(t)
	tmpl := p.template(name)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{usage}
	tmpl.IPAddresses, tmpl.DNSNames = []net.IP{net.ParseIP("127.0.0.1")}, []string{"localhost"}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caPriv)
	require.NoError(t, err)
	p.write(t, name, der, key)
	return p.path(name + ".pem"), p.path(name + "-key.pem")
}

func (p *testPKI) template(cn string) *x509.Certificate {
	p.serial++
	return &x509.Certificate{SerialNumber: big.NewInt(p.serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
}

func (p *testPKI) write(t *testing.T, name string, der []byte, key *ecdsa.PrivateKey) {
	t.Helper()
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p.path(name+".pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644))
	require.NoError(t, os.WriteFile(p.path(name+"-key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	return key
}

// tlsOpts are the -o options that make a daemon trust ca and show the
// client certificate.
func (p *testPKI) tlsOpts(ca string) []string {
	return []string{"etcd_cacert=" + ca, "etcd_cert=" + p.client, "etcd_key=" + p.clientKey}
}

// passwordFile writes password to a new file with mode perm.
func passwordFile(t *testing.T, password string, perm os.FileMode) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "etcd-password")
	require.NoError(t, os.WriteFile(f, []byte(password+"\n"), perm))
	require.NoError(t, os.Chmod(f, perm)) // past the umask
	return f
}

// The refusals of the TLS and password options, before any etcd or
// mount: exit 2, naming the option and the file.
func TestEtcdAuthOptionRefusals(t *testing.T) {
	p := newTestPKI(t)
	open := passwordFile(t, "pw", 0o644)
	good := passwordFile(t, "pw", 0o600)
	empty := passwordFile(t, "", 0o600)
	const https = "cluster=etcd,etcd=https://127.0.0.1:2379,"
	cases := []struct{ opts, msg string }{
		{"etcd_cacert=" + p.ca, "etcd_cacert needs cluster=etcd"},
		{"etcd_user=u,etcd_password_file=" + good, "etcd_user needs cluster=etcd"},
		{https + "etcd_cacert=" + p.missing, "etcd_cacert=" + p.missing + ": no such file"},
		{https + "etcd_cacert=" + p.garbage, "etcd_cacert=" + p.garbage + ": no PEM certificate"},
		{https + "etcd_cacert=" + p.aDir, "etcd_cacert=" + p.aDir + ": is a directory"},
		{https + "etcd_cert=" + p.client, "etcd_cert and etcd_key go together"},
		{https + "etcd_key=" + p.clientKey, "etcd_cert and etcd_key go together"},
		{https + "etcd_cert=" + p.client + ",etcd_key=" + p.missing, "etcd_key=" + p.missing + ": no such file"},
		{https + "etcd_cert=" + p.garbage + ",etcd_key=" + p.clientKey, "etcd_cert=" + p.garbage + ", etcd_key="},
		{https + "etcd_cert=" + p.client + ",etcd_key=" + p.serverKey, "private key does not match"},
		{"cluster=etcd,etcd=http://127.0.0.1:2379,etcd_cacert=" + p.ca, "need https:// endpoints"},
		{"cluster=etcd,etcd=https://a:1+http://b:1", "all endpoints https:// or none"},
		{https + "etcd_user=u", "etcd_user and etcd_password_file go together"},
		{https + "etcd_password_file=" + good, "etcd_user and etcd_password_file go together"},
		{https + "etcd_user=u,etcd_password_file=" + p.missing, "etcd_password_file=" + p.missing + ": no such file"},
		{https + "etcd_user=u,etcd_password_file=" + open, "etcd_password_file=" + open + ": permissions 0644 are too open"},
		{https + "etcd_user=u,etcd_password_file=" + empty, "want the password on one line"},
		{https + "etcd_user=,etcd_password_file=" + good, "bad value for option etcd_user"},
	}
	for _, c := range cases {
		t.Run(c.opts, func(t *testing.T) {
			_, err := parseMountArgs([]string{"-o", c.opts, "b", "m"})
			require.Error(t, err)
			assert.Equal(t, exitUsage, exitCode(err), "%v", err)
			assert.Contains(t, err.Error(), c.msg)
			assert.NotContains(t, err.Error(), "pw\n")
		})
	}
}

// The accepted forms: the files are read at parse time into a TLS
// config and a password; https:// alone uses the system's roots.
func TestEtcdAuthOptionsLoad(t *testing.T) {
	p := newTestPKI(t)
	pw := passwordFile(t, "s3cret", 0o600)
	a, err := parseMountArgs([]string{"-o", "cluster=etcd,etcd=https://127.0.0.1:2379," +
		strings.Join(p.tlsOpts(p.ca), ",") + ",etcd_user=web,etcd_password_file=" + pw, "b", "m"})
	require.NoError(t, err)
	auth := a.cfg.cluster.auth
	require.NotNil(t, auth.tls)
	assert.Len(t, auth.tls.Certificates, 1)
	assert.NotNil(t, auth.tls.RootCAs)
	assert.Equal(t, "web", auth.user)
	assert.Equal(t, "s3cret", auth.password)

	a, err = parseMountArgs([]string{"-o", "cluster=etcd,etcd=https://127.0.0.1:2379", "b", "m"})
	require.NoError(t, err)
	require.NotNil(t, a.cfg.cluster.auth.tls, "https:// without etcd_cacert still uses TLS")
	assert.Nil(t, a.cfg.cluster.auth.tls.RootCAs, "system roots")

	a, err = parseMountArgs([]string{"-o", "cluster=etcd,etcd=http://127.0.0.1:2379", "b", "m"})
	require.NoError(t, err)
	assert.Nil(t, a.cfg.cluster.auth.tls, "http:// is plain")
}

// startTLSEtcd starts etcd on https with p's server certificate; with
// clientCerts it wants a client certificate signed by p's CA.
func startTLSEtcd(t *testing.T, p *testPKI, clientCerts bool) *etcdtest.Server {
	t.Helper()
	cfg := &etcdtest.TLS{CertFile: p.server, KeyFile: p.serverKey, Client: p.clientTLS}
	if clientCerts {
		cfg.TrustedCAFile, cfg.ClientCertAuth = p.ca, true
	}
	return etcdtest.StartTLS(t, cfg)
}

// Two daemons reach etcd over TLS with client certificates and their
// appends to one file are serialized: every line once, whole. A daemon
// without the client certificate, or that does not trust etcd's CA,
// exits 13 and mounts nothing.
func TestClusterTLS(t *testing.T) {
	clusterPrereqs(t)
	p := newTestPKI(t)
	e := startTLSEtcd(t, p, true)
	require.True(t, strings.HasPrefix(e.URL, "https://"), e.URL)
	backing := tempDir(t)
	m1, m2 := nodeMnt(t, "n1"), nodeMnt(t, "n2")
	startNodeWith(t, e, backing, m1, "n1", p.tlsOpts(p.ca), nil)
	startNodeWith(t, e, backing, m2, "n2", p.tlsOpts(p.ca), nil)
	appendExact(t, backing, []string{m1, m2}, 2, 25)

	mnt := tempDir(t)
	t.Cleanup(func() { unmountIfMounted(t, mnt) }) // a refusal that failed
	for _, c := range []struct{ name, opts, why string }{
		{"no client certificate", "etcd_cacert=" + p.ca, "tls: (bad certificate|certificate required)"}, // TLS 1.2, 1.3
		{"wrong CA", strings.Join(p.tlsOpts(p.otherCA), ","), "unknown authority"},
		{"system roots", "etcd_cert=" + p.client + ",etcd_key=" + p.clientKey, "unknown authority"},
	} {
		r := runSafefs(t, nil, "mount", "-o", clusterOpts(e, "n3", c.opts), backing, mnt)
		require.Equal(t, exitCluster, r.code, "%s: %s", c.name, r.stderr)
		require.Contains(t, r.stderr, "cannot be reached", c.name)
		require.Contains(t, r.stderr, "over TLS", c.name)
		require.Regexp(t, c.why, r.stderr, c.name)
		_, mounted := mountType(t, mnt)
		require.False(t, mounted, c.name)
	}
}

// enableAuth makes etcd want a user: root, "web" with read and write on
// /safefs/, and "reader" with read only.
func enableAuth(t *testing.T, cli *clientv3.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	end := clientv3.GetPrefixRangeEnd("/safefs/")
	steps := []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.RoleAdd(ctx, "safefs"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "safefs", "/safefs/", end, clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, "web", "s3cret-pw"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "web", "safefs"); return err },
		func() error { _, err := cli.RoleAdd(ctx, "ro"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "ro", "/safefs/", end, clientv3.PermissionType(clientv3.PermRead))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, "reader", "reader-pw"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "reader", "ro"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		require.NoError(t, step(), "auth step %d", i)
	}
}

// etcd over TLS with a user and password: the right password file
// mounts and commits; a wrong password, a user that may only read, or
// no user exit 14 and mount nothing; a password file others may read is
// refused (exit 2). No password shows in any output.
func TestClusterAuth(t *testing.T) {
	clusterPrereqs(t)
	p := newTestPKI(t)
	e := startTLSEtcd(t, p, false)
	enableAuth(t, e.Client(t))
	backing := tempDir(t)
	tlsOpt := "etcd_cacert=" + p.ca
	good := passwordFile(t, "s3cret-pw", 0o600)
	mnt := nodeMnt(t, "n1")
	d := startNodeWith(t, e, backing, mnt, "n1", []string{tlsOpt, "etcd_user=web", "etcd_password_file=" + good}, nil)
	require.NoError(t, os.WriteFile(filepath.Join(mnt, "f"), []byte("committed\n"), 0o644))
	got, err := os.ReadFile(filepath.Join(backing, "f"))
	require.NoError(t, err)
	require.Equal(t, "committed\n", string(got))
	st := runSafefs(t, nil, "status", mnt)
	require.Equal(t, exitOK, st.code, st.stderr)

	other := tempDir(t)
	t.Cleanup(func() { unmountIfMounted(t, other) }) // a refusal that failed
	cases := []struct {
		name string
		opts []string
		code int
		msg  string
	}{
		{"wrong password", []string{"etcd_user=web", "etcd_password_file=" + passwordFile(t, "wrong-pw", 0o600)},
			exitClusterRefused, `refused user "web"`},
		{"read only", []string{"etcd_user=reader", "etcd_password_file=" + passwordFile(t, "reader-pw", 0o600)},
			exitClusterRefused, `refused user "reader"`},
		{"no user", nil, exitClusterRefused, "without etcd_user"},
		{"password file 0644", []string{"etcd_user=web", "etcd_password_file=" + passwordFile(t, "s3cret-pw", 0o644)},
			exitUsage, "permissions 0644 are too open"},
	}
	for _, c := range cases {
		r := runSafefs(t, nil, "mount", "-o", clusterOpts(e, "n2", append([]string{tlsOpt}, c.opts...)...), backing, other)
		require.Equal(t, c.code, r.code, "%s: %s", c.name, r.stderr)
		require.Contains(t, r.stderr, c.msg, c.name)
		_, mounted := mountType(t, other)
		require.False(t, mounted, c.name)
		for _, pw := range []string{"s3cret-pw", "wrong-pw", "reader-pw"} {
			require.NotContains(t, r.stderr, pw, c.name)
		}
	}
	stopMount(t, d)
	for _, out := range []string{d.out.String(), st.stdout, st.stderr} {
		require.NotContains(t, out, "s3cret-pw")
	}
}
