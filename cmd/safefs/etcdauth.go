package main

// etcd TLS and authentication options of cluster mode.

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"strings"
)

// setEtcdUser: the etcd user the daemon logs in as (etcd_user).
func setEtcdUser(c *mountConfig, v string) error {
	if v == "" || strings.ContainsAny(v, "\x00") {
		return errors.New("want a user name")
	}
	c.cluster.auth.user = v
	return nil
}

// setFile is a setter for an option naming a file; the file is read
// once the options are all parsed.
func setFile(dst func(c *mountConfig) *string) func(c *mountConfig, v string) error {
	return func(c *mountConfig, v string) error {
		if v == "" {
			return errors.New("want a file name")
		}
		*dst(c) = v
		return nil
	}
}

// etcdAuth is how a daemon proves itself to etcd: TLS (a CA to check
// the server, a client certificate) and a user whose password is read
// from a file, never from the command line where ps shows it.
type etcdAuth struct {
	cacert, cert, key  string // files as given
	user, passwordFile string
	tls                *tls.Config // nil: plain http
	password           string      // never logged
}

// given names the first auth option set, or "".
func (a etcdAuth) given() string {
	for _, o := range []struct{ name, v string }{{"etcd_cacert", a.cacert}, {"etcd_cert", a.cert},
		{"etcd_key", a.key}, {"etcd_user", a.user}, {"etcd_password_file", a.passwordFile}} {
		if o.v != "" {
			return o.name
		}
	}
	return ""
}

// load checks the options against each other and the endpoints, and
// reads the files.
func (a *etcdAuth) load(endpoints []string) error {
	if (a.cert == "") != (a.key == "") {
		return failf(exitUsage, "options etcd_cert and etcd_key go together: give both or neither")
	}
	if (a.user == "") != (a.passwordFile == "") {
		return failf(exitUsage, "options etcd_user and etcd_password_file go together: give both or neither")
	}
	https := 0
	for _, e := range endpoints {
		if strings.HasPrefix(e, "https://") {
			https++
		}
	}
	switch {
	case https > 0 && https < len(endpoints):
		return failf(exitUsage, "option etcd: all endpoints https:// or none (%s)", strings.Join(endpoints, "+"))
	case https == 0 && (a.cacert != "" || a.cert != ""):
		return failf(exitUsage, "options etcd_cacert, etcd_cert and etcd_key need https:// endpoints (etcd=%s)", strings.Join(endpoints, "+"))
	}
	if https > 0 {
		if err := a.loadTLS(); err != nil {
			return err
		}
	}
	if a.passwordFile != "" {
		p, err := readPasswordFile(a.passwordFile)
		if err != nil {
			return err
		}
		a.password = p
	}
	return nil
}

// loadTLS builds the client's TLS config; without etcd_cacert the
// server is checked against the system's roots.
func (a *etcdAuth) loadTLS() error {
	a.tls = &tls.Config{MinVersion: tls.VersionTLS12}
	if a.cacert != "" {
		pem, err := readOptionFile("etcd_cacert", a.cacert)
		if err != nil {
			return err
		}
		a.tls.RootCAs = x509.NewCertPool()
		if !a.tls.RootCAs.AppendCertsFromPEM(pem) {
			return failf(exitUsage, "option etcd_cacert=%s: no PEM certificate in it", a.cacert)
		}
	}
	if a.cert == "" {
		return nil
	}
	certPEM, err := readOptionFile("etcd_cert", a.cert)
	if err != nil {
		return err
	}
	keyPEM, err := readOptionFile("etcd_key", a.key)
	if err != nil {
		return err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return failf(exitUsage, "options etcd_cert=%s, etcd_key=%s: %v", a.cert, a.key, err)
	}
	a.tls.Certificates = []tls.Certificate{pair}
	return nil
}

func readOptionFile(option, path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, failf(exitUsage, "option %s=%s: %v", option, path, pathErr(err))
	}
	return b, nil
}

// readPasswordFile reads the password (one line) and refuses a file
// that group or others may access, as ssh does with keys.
func readPasswordFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", failf(exitUsage, "option etcd_password_file=%s: %v", path, pathErr(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", failf(exitUsage, "option etcd_password_file=%s: %v", path, pathErr(err))
	}
	if !st.Mode().IsRegular() {
		return "", failf(exitUsage, "option etcd_password_file=%s: not a regular file", path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return "", failf(exitUsage, "option etcd_password_file=%s: permissions %04o are too open (group or others may read it): chmod 600 %s",
			path, perm, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", failf(exitUsage, "option etcd_password_file=%s: %v", path, pathErr(err))
	}
	p := strings.TrimRight(string(b), "\r\n")
	if p == "" || strings.ContainsAny(p, "\r\n") {
		return "", failf(exitUsage, "option etcd_password_file=%s: want the password on one line", path)
	}
	return p, nil
}

// pathErr drops the path an *os.PathError repeats.
func pathErr(err error) error {
	var pe *iofs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// who names the client etcd refused.
func (a etcdAuth) who() string {
	if a.user == "" {
		return "a client without etcd_user (etcd has authentication on: give etcd_user and etcd_password_file)"
	}
	return fmt.Sprintf("user %q (etcd_user; wrong password in etcd_password_file, or no read and write on the prefix)", a.user)
}

// tlsHint is said when a TLS connection fails: a handshake failure
// looks like an etcd that does not answer.
func (a etcdAuth) tlsHint() string {
	if a.tls == nil {
		return ""
	}
	return " (over TLS: a refused handshake looks the same; check etcd_cacert, etcd_cert and etcd_key)"
}
