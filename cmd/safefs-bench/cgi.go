package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// errLostUpdates: a counter that every request increments under a lock
// ended below the number of requests.
var errLostUpdates = errors.New("lost updates")

// The cgi-php-flock workload: Apache (mod_cgid) runs the PHP manual's
// flock example as a CGI counter (php-cgi), which releases its lock
// before it closes the file, on count.txt in the target directory:
// cgiConns clients, cfg.cgiN requests. Every request must be counted:
// a lost update is an error, not a slower row.

const (
	cgiConns   = 16
	cgiCounter = "count.txt"
	phpCGI     = "/usr/bin/php-cgi"
)

// cgiPHPFlock is the script; %s is the counter's path. php-cgi refuses
// to run as a plain CGI unless cgi.force_redirect is off.
const cgiPHPFlock = `#!/usr/bin/php-cgi -dcgi.force_redirect=0
<?php
$fp = fopen('%s', 'c+');
if (!$fp || !flock($fp, LOCK_EX)) { header('Status: 500'); exit; }
$n = (int)stream_get_contents($fp) + 1;
ftruncate($fp, 0);
rewind($fp);
fwrite($fp, "$n\n");
fflush($fp);
flock($fp, LOCK_UN);
fclose($fp);
header('Content-Type: text/plain');
echo "$n\n";
`

func cgiSetup(e *env) error {
	if _, err := apacheBin(); err != nil {
		return err
	}
	if _, err := os.Stat(phpCGI); err != nil {
		return fmt.Errorf("php-cgi not installed: %w", err)
	}
	www, err := wwwData()
	if err != nil {
		return err
	}
	p := e.path(cgiCounter)
	if err := writeFile(p, syscall.O_CREAT|syscall.O_TRUNC, []byte("0\n")); err != nil {
		return err
	}
	return os.Chown(p, int(www.Uid), int(www.Gid))
}

// cgiBinConf puts the scripts (name: text) in Apache's temporary
// directory, served as /cgi-bin/NAME.
func cgiBinConf(scripts map[string][]byte) func(tmp string) (string, error) {
	return func(tmp string) (string, error) {
		bin := filepath.Join(tmp, "cgi-bin")
		if err := os.Mkdir(bin, 0o755); err != nil {
			return "", err
		}
		if err := os.Chmod(tmp, 0o755); err != nil {
			return "", err
		}
		for name, s := range scripts {
			if err := os.WriteFile(filepath.Join(bin, name), s, 0o755); err != nil {
				return "", err
			}
		}
		return fmt.Sprintf("LoadModule alias_module %s/mod_alias.so\nScriptAlias /cgi-bin/ \"%s/\"\n", apacheModules, bin), nil
	}
}

// cgiConf serves the PHP flock counter as /cgi-bin/counter.
func cgiConf(counter string) func(tmp string) (string, error) {
	return cgiBinConf(map[string][]byte{"counter": fmt.Appendf(nil, cgiPHPFlock, counter)})
}

func cgiRun(e *env) (float64, error) {
	srv, err := startApacheWith(e.ctx, e.dir, cgiConf(e.path(cgiCounter)))
	if err != nil {
		return 0, err
	}
	defer srv.stop()
	start := time.Now()
	var c apacheCounts
	cgiFetchAll(srv.addr, e.cfg.cgiN, &c)
	e.secs = time.Since(start).Seconds()
	log := srv.errorLog()
	if err := srv.stop(); err != nil {
		return 0, err
	}
	if n := c.failed.Load(); n > 0 {
		return 0, fmt.Errorf("%d of %d requests failed, first: %v%s", n, e.cfg.cgiN, c.firstFail.Load(), log)
	}
	b, err := os.ReadFile(e.path(cgiCounter))
	if err != nil {
		return 0, err
	}
	if got, _ := strconv.Atoi(strings.TrimSpace(string(b))); got != e.cfg.cgiN {
		return 0, fmt.Errorf("%w: the counter is %q after %d requests", errLostUpdates, bytes.TrimSpace(b), e.cfg.cgiN)
	}
	return float64(e.cfg.cgiN), nil
}

// cgiFetchAll sends n GETs of the counter over cgiConns keep-alive
// connections; any answer but 200 is a failure.
func cgiFetchAll(addr string, n int, c *apacheCounts) {
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: cgiConns}}
	defer client.CloseIdleConnections()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range cgiConns {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if err := drained(client.Get("http://" + addr + "/cgi-bin/counter")); err != nil {
					c.fail(err)
					continue
				}
				c.whole.Add(1)
			}
		})
	}
	wg.Wait()
}

// drained reads a request's response to its end and closes it: an
// error if the request failed or its status is not 200 OK.
func drained(resp *http.Response, err error) error {
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	return nil
}
