package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The apache workload ("serving data files to the web"): Apache
// 2.4 (mpm_event, mod_cgid, Debian's defaults otherwise) serves page.html
// from the target directory to 32 keep-alive connections of a Go client
// while a Perl loop, as www-data like a CGI script, rewrites the page
// (open ">", print, close) with sizes of 60-100 KiB. Each version is
// self-checking (a header with its number and length, a filler that
// depends on the number, a trailer), so the client counts the responses
// that are not exactly one whole version: Apache takes the length from a
// stat by name, then opens the name, and a commit between the two gives it
// another version.

const (
	apacheConns   = 32
	apachePage    = "page.html"
	apacheModules = "/usr/lib/apache2/modules"
)

var errNoApache = errors.New("apache2 not installed")

// apacheBin is Debian's apache2 binary, or errNoApache.
func apacheBin() (string, error) {
	if p, err := exec.LookPath("apache2"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/apache2"); err == nil {
		return "/usr/sbin/apache2", nil
	}
	return "", errNoApache
}

// versionSize is version v's length: 79 KiB for version 0 (the issue's
// static page), then 60-100 KiB.
func versionSize(v int) int { return 61440 + (v*7919+19456)%40960 }

// pageInto builds version v of the page in buf, as rewriterScript does.
func pageInto(buf []byte, v int) []byte {
	n := versionSize(v)
	head := fmt.Sprintf("safefs-bench page %d %d\n", v, n)
	tail := fmt.Sprintf("end of page %d\n", v)
	line := append(bytes.Repeat([]byte{byte('a' + v%26)}, 63), '\n')
	fill := n - len(head) - len(tail)
	buf = append(buf[:0], head...)
	buf = append(buf, bytes.Repeat(line, fill/64+1)[:fill]...)
	return append(buf, tail...)
}

// wholePages makes a fetcher's check of the apache row's page.
func wholePages() func([]byte) bool { return pageCache{}.wholePage }

// pageCache keeps the versions a fetcher saw last, so that checking a
// body is one compare: the client must not steal much CPU from Apache.
type pageCache map[int][]byte

// wholePage reports whether body is exactly one version of the page.
func (pc pageCache) wholePage(body []byte) bool {
	line, _, ok := bytes.Cut(body, []byte("\n"))
	f := strings.Fields(string(line))
	if !ok || len(f) != 4 || f[0] != "safefs-bench" || f[1] != "page" {
		return false
	}
	v, err := strconv.Atoi(f[2])
	if err != nil || v < 0 || f[3] != strconv.Itoa(versionSize(v)) || len(body) != versionSize(v) {
		return false
	}
	page, ok := pc[v]
	if !ok {
		if len(pc) >= 16 {
			clear(pc)
		}
		page = pageInto(nil, v)
		pc[v] = page
	}
	return bytes.Equal(body, page)
}

// rewriterScript rewrites the page until SIGTERM, pausing the given
// seconds after each rewrite, then prints how many versions it wrote. It ends a rewrite it began (Perl defers the signal).
const rewriterScript = `
my ($file, $pause) = @ARGV;
my $stop = 0;
$SIG{TERM} = sub { $stop = 1 };
my $v = 0;
until ($stop) {
    $v++;
    my $page = page($v);
    open(PAGE, ">$file") or die "open >$file: $!\n";
    print PAGE $page;
    close(PAGE) or die "close $file: $!\n";
    select(undef, undef, undef, $pause) if $pause > 0;
}
print "$v\n";

sub page {
    my ($v) = @_;
    my $n = 61440 + ($v * 7919 + 19456) % 40960;
    my $head = "safefs-bench page $v $n\n";
    my $tail = "end of page $v\n";
    my $fill = $n - length($head) - length($tail);
    my $line = chr(97 + $v % 26) x 63 . "\n";
    return $head . substr($line x (int($fill / 64) + 1), 0, $fill) . $tail;
}
`

// apacheSetup writes version 0 through the target and gives it to
// www-data, the rewriter's user.
func apacheSetup(e *env) error {
	if _, err := apacheBin(); err != nil {
		return err
	}
	www, err := wwwData()
	if err != nil {
		return err
	}
	p := e.path(apachePage)
	if err := writeFile(p, syscall.O_CREAT|syscall.O_TRUNC, pageInto(nil, 0)); err != nil {
		return err
	}
	return os.Chown(p, int(www.Uid), int(www.Gid))
}

func wwwData() (*syscall.Credential, error) {
	u, err := user.Lookup("www-data")
	if err != nil {
		return nil, err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// apacheCounts are one run's requests, by outcome. Cut short are dropped
// (the connection closed before a response, as Apache does when the file
// reads shorter than its stat said, or a garbled response; or 403/404: the
// file was gone between the stat and the open), short (body shorter than
// Content-Length) and torn (as long as Content-Length said, but not one
// whole version: a newer version cut to the older length, or a mix).
type apacheCounts struct {
	whole, dropped, short, torn, failed atomic.Int64
	firstFail                           atomic.Value // string: the first failure, for the error
}

func (c *apacheCounts) cut() int64 { return c.dropped.Load() + c.short.Load() + c.torn.Load() }

func (c *apacheCounts) fail(err error) {
	c.failed.Add(1)
	c.firstFail.CompareAndSwap(nil, err.Error())
}

// apacheRun serves the page under rewrites and returns the requests
// answered (whole or cut short), timed from the first request to the last
// answer; e.extra gets the cut-short cell.
func apacheRun(e *env) (float64, error) {
	srv, err := startApache(e.ctx, e.dir)
	if err != nil {
		return 0, err
	}
	defer srv.stop()
	rw, err := startRewriter(e.ctx, e.path(apachePage), e.cfg.apachePause)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	var c apacheCounts
	fetchAll(e.ctx, srv.addr, "/"+apachePage, e.cfg.apacheN, apacheConns, wholePages, &c)
	e.secs = time.Since(start).Seconds()
	log := srv.errorLog() // before stop removes it
	rewrites, rerr := rw.stop()
	if err := errors.Join(e.ctx.Err(), rerr, srv.stop()); err != nil {
		return 0, err
	}
	if n := c.failed.Load(); n > 0 {
		return 0, fmt.Errorf("%d of %d requests failed, first: %v%s", n, e.cfg.apacheN, c.firstFail.Load(), log)
	}
	cut, done := c.cut(), c.whole.Load()+c.cut()
	if done != int64(e.cfg.apacheN) {
		return 0, fmt.Errorf("%d outcomes counted for %d requests", done, e.cfg.apacheN)
	}
	e.extra = fmt.Sprintf("%.2f %% (%d/%d: %d dropped, %d short, %d torn; %d rewrites)",
		100*float64(cut)/float64(done), cut, done, c.dropped.Load(), c.short.Load(), c.torn.Load(), rewrites)
	return float64(done), nil
}

// fetchAll sends n GETs of path to addr over conns keep-alive
// connections and counts each outcome; whole() makes a connection's
// check that a body is one whole version. It speaks HTTP/1.1 on its own
// connections, not through http.Client, whose Transport silently resends
// a GET that a reused connection dropped: that would hide the drops.
func fetchAll(ctx context.Context, addr, path string, n, conns int, whole func() func([]byte) bool, c *apacheCounts) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			f := fetcher{addr: addr, path: path, c: c, whole: whole()}
			defer f.close()
			for next.Add(1) <= int64(n) && ctx.Err() == nil {
				f.fetch()
			}
		})
	}
	wg.Wait()
}

// fetcher is one client connection, dialled again after each close.
type fetcher struct {
	addr, path string
	c          *apacheCounts
	conn       net.Conn
	br         *bufio.Reader
	whole      func(body []byte) bool
}

func (f *fetcher) close() {
	if f.conn != nil {
		f.conn.Close()
		f.conn = nil
	}
}

// fetch sends one request and counts its outcome; the connection is
// closed after any error and when the server says so.
func (f *fetcher) fetch() {
	if f.conn == nil {
		conn, err := net.DialTimeout("tcp", f.addr, 10*time.Second)
		if err != nil {
			f.c.fail(err)
			return
		}
		f.conn, f.br = conn, bufio.NewReader(conn)
	}
	f.conn.SetDeadline(time.Now().Add(time.Minute)) // a hang is a failure, not a wait
	req := "GET " + f.path + " HTTP/1.1\r\nHost: " + f.addr + "\r\n\r\n"
	if _, err := io.WriteString(f.conn, req); err != nil {
		f.close()
		f.c.fail(err)
		return
	}
	resp, err := http.ReadResponse(f.br, nil)
	if err != nil {
		// Closed, reset or garbled (a previous body that was not as long
		// as its Content-Length said): no response. A timeout is a failure.
		f.close()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			f.c.fail(err)
		} else {
			f.c.dropped.Add(1)
		}
		return
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.Close {
		f.close()
	}
	switch {
	case resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusNotFound:
		// The page was gone between Apache's stat and its open (a
		// rename over it, seen late through a caching mount): no page.
		f.c.dropped.Add(1)
	case resp.StatusCode != http.StatusOK:
		f.c.fail(fmt.Errorf("status %s", resp.Status))
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET):
		f.c.short.Add(1)
	case err != nil:
		f.c.fail(err)
	case int64(len(body)) != resp.ContentLength:
		f.c.short.Add(1) // no Content-Length, or a body longer than it
	case f.whole(body):
		f.c.whole.Add(1)
	default:
		f.c.torn.Add(1)
	}
}

// rewriter is the Perl loop that rewrites the page.
type rewriter struct {
	cmd *exec.Cmd
	out bytes.Buffer
}

func startRewriter(ctx context.Context, page string, pause time.Duration) (*rewriter, error) {
	www, err := wwwData()
	if err != nil {
		return nil, err
	}
	r := &rewriter{cmd: exec.CommandContext(ctx, "perl", "-e", rewriterScript, page, strconv.FormatFloat(pause.Seconds(), 'f', -1, 64))}
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: www}
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
	if err := r.cmd.Start(); err != nil {
		return nil, fmt.Errorf("rewriter: %w", err)
	}
	return r, nil
}

// stop ends the loop after its current rewrite and returns the rewrites.
func (r *rewriter) stop() (int, error) {
	r.cmd.Process.Signal(syscall.SIGTERM)
	if err := r.cmd.Wait(); err != nil {
		return 0, fmt.Errorf("rewriter: %w: %s", err, strings.TrimSpace(r.out.String()))
	}
	n, err := strconv.Atoi(strings.TrimSpace(r.out.String()))
	if err != nil {
		return 0, fmt.Errorf("rewriter printed %q", r.out.String())
	}
	return n, nil
}

// apache is one Apache server, its own process group, config and logs in
// a temporary directory.
type apache struct {
	cmd     *exec.Cmd
	tmp     string
	addr    string
	stopped bool
	err     error
}

// apacheConf: Debian's defaults for what it sets (mpm_event, KeepAlive,
// EnableMMAP and EnableSendfile left as compiled), everything in tmp.
const apacheConf = `ServerRoot "%[1]s"
ServerName 127.0.0.1
Listen %[2]s
PidFile "%[1]s/apache2.pid"
ErrorLog "%[1]s/error.log"
DefaultRuntimeDir "%[1]s"
Mutex file:%[1]s default
LoadModule mpm_event_module %[3]s/mod_mpm_event.so
LoadModule authz_core_module %[3]s/mod_authz_core.so
LoadModule mime_module %[3]s/mod_mime.so
LoadModule cgid_module %[3]s/mod_cgid.so
ScriptSock "%[1]s/cgisock"
TypesConfig /etc/mime.types
User www-data
Group www-data
KeepAlive On
MaxKeepAliveRequests 100
KeepAliveTimeout 5
DocumentRoot "%[4]s"
<Directory "%[4]s">
    Require all granted
</Directory>
%[5]s`

// startApache starts Apache on a free loopback port serving dir and
// waits until it answers.
func startApache(ctx context.Context, dir string) (*apache, error) {
	return startApacheWith(ctx, dir, nil)
}

// startApacheWith is startApache with more configuration: more writes
// files into Apache's temporary directory and returns lines for its
// configuration (cgi.go).
func startApacheWith(ctx context.Context, dir string, more func(tmp string) (string, error)) (*apache, error) {
	bin, err := apacheBin()
	if err != nil {
		return nil, err
	}
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "safefs-bench-apache-")
	if err != nil {
		return nil, err
	}
	a := &apache{tmp: tmp, addr: addr}
	extra := ""
	if more != nil {
		if extra, err = more(tmp); err != nil {
			os.RemoveAll(tmp)
			return nil, err
		}
	}
	conf := filepath.Join(tmp, "apache2.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, apacheConf, tmp, addr, apacheModules, dir, extra), 0o644); err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	out, err := os.Create(filepath.Join(tmp, "stderr.log"))
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	defer out.Close()
	a.cmd = exec.Command(bin, "-f", conf, "-DFOREGROUND")
	a.cmd.Stdout, a.cmd.Stderr = out, out
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := a.cmd.Start(); err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("apache2: %w", err)
	}
	if err := a.waitReady(ctx); err != nil {
		return nil, errors.Join(err, a.stop())
	}
	return a, nil
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// waitReady polls until Apache answers (any status), for up to 30 s.
func (a *apache) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + a.addr + "/")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("apache2 did not answer on %s: %v%s", a.addr, err, a.errorLog())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop stops Apache (SIGTERM: the parent ends its children), kills what
// is left of its process group, and removes tmp. It can be called twice.
func (a *apache) stop() error {
	if a.stopped {
		return a.err
	}
	a.stopped = true
	pid := a.cmd.Process.Pid
	syscall.Kill(pid, syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- a.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			a.err = fmt.Errorf("apache2: %w%s", err, a.errorLog())
		}
	case <-time.After(30 * time.Second):
		syscall.Kill(-pid, syscall.SIGKILL)
		<-done
		a.err = errors.New("apache2 did not stop within 30 s after SIGTERM: killed")
	}
	// The parent may exit a moment before its last children (a CGI
	// script still in its sleep): give them up to 10 s to go.
	for i := 0; i < 200 && syscall.Kill(-pid, 0) == nil; i++ {
		time.Sleep(50 * time.Millisecond)
	}
	if syscall.Kill(-pid, 0) == nil {
		syscall.Kill(-pid, syscall.SIGKILL)
		a.err = errors.Join(a.err, errors.New("apache2 left processes behind: killed"))
	}
	a.err = errors.Join(a.err, os.RemoveAll(a.tmp))
	return a.err
}

// errorLog returns the end of Apache's stderr and error log, for errors.
func (a *apache) errorLog() string {
	var s string
	for _, name := range []string{"stderr.log", "error.log"} {
		b, _ := os.ReadFile(filepath.Join(a.tmp, name))
		if len(b) > 0 {
			s += "; " + name + ": " + strings.TrimSpace(string(b[max(0, len(b)-2000):]))
		}
	}
	return s
}

func apacheCutTitle(c config) string {
	return fmt.Sprintf("apache: cut short / %d responses", c.apacheN)
}
