package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The cgi-apps rows: what a site's visitors feel, as classic CGI apps
// under Apache (mod_cgid, apache.go's setup) on each target, every
// request checked afterwards (a count short is an error). The scripts
// live in Apache's temporary directory; their data in appsDir of the
// target, which belongs to www-data.

const (
	appsDir       = "cgi-apps"
	appsCGIConns  = 16 // clients at once on the CGI apps
	guestbookPage = "guestbook.html"
	hitsFile      = "hits.txt"
	dbmFile       = "hits.gdbm"
	logFile       = "access.log"
	entryMark     = "<!--entry-->"
	logLineEnd    = " hit"
)

// appScripts are the Perl CGI scripts, by name under /cgi-bin/; @DIR@ is
// the data directory.
var appScripts = map[string]string{
	// Matt's Script Archive's guestbook: read the page, rewrite it with
	// the entry after <!--begin-->, under a lock file (the fixed form:
	// the original, unlocked, loses entries on any file system).
	"guestbook": `#!/usr/bin/perl
use Fcntl qw(:flock);
my $dir = '@DIR@';
read(STDIN, my $body, $ENV{CONTENT_LENGTH} || 0);
my %f;
for (split /&/, $body) {
    my ($k, $v) = split /=/, $_, 2;
    $v =~ tr/+/ /;
    $v =~ s/%([0-9A-Fa-f]{2})/chr(hex($1))/ge;
    $f{$k} = $v;
}
open(LOCK, ">>$dir/guestbook.lock") or die "lock: $!";
flock(LOCK, LOCK_EX) or die "flock: $!";
open(FILE, "<$dir/` + guestbookPage + `") or die "open: $!";
my @LINES = <FILE>;
close(FILE);
open(GUEST, ">$dir/` + guestbookPage + `") or die "rewrite: $!";
for (@LINES) {
    if (/<!--begin-->/) {
        print GUEST "<!--begin-->\n` + entryMark + `\n<b>$f{comment}</b><br>\n$f{realname}<br>\n" . scalar(localtime) . "<hr>\n";
    } else {
        print GUEST $_;
    }
}
close(GUEST) or die "close: $!";
close(LOCK);
print "Content-Type: text/html\n\n<html><body><h1>Thank you for signing the guestbook</h1></body></html>\n";
`,
	// A hit counter under flock, rewritten in place.
	"hits": `#!/usr/bin/perl
use Fcntl qw(:flock);
open(my $f, '+<', '@DIR@/` + hitsFile + `') or die "open: $!";
flock($f, LOCK_EX) or die "flock: $!";
my $n = <$f> + 1;
seek($f, 0, 0) or die "seek: $!";
truncate($f, 0) or die "truncate: $!";
print $f "$n\n";
close($f) or die "close: $!";
print "Content-Type: text/plain\n\n$n\n";
`,
	// A counter in a GDBM file under a lock file.
	"dbm": `#!/usr/bin/perl
use Fcntl qw(:flock);
use GDBM_File;
open(my $l, '>>', '@DIR@/dbm.lock') or die "lock: $!";
flock($l, LOCK_EX) or die "flock: $!";
tie(my %h, 'GDBM_File', '@DIR@/` + dbmFile + `', &GDBM_WRCREAT, 0644) or die "tie: $!";
my $n = ++$h{hits};
untie %h;
close($l);
print "Content-Type: text/plain\n\n$n\n";
`,
	// An access log: open for append, one line, close; no lock.
	"log": `#!/usr/bin/perl
open(F, ">>@DIR@/` + logFile + `") or die "open: $!";
print F "$ENV{REMOTE_ADDR} $$ $ENV{QUERY_STRING}` + logLineEnd + `\n";
close(F) or die "close: $!";
print "Content-Type: text/plain\n\nlogged\n";
`,
}

// guestbookInit is the guestbook's page before any entry.
const guestbookInit = `<html><head><title>Guestbook</title></head>
<body>
<h1>Guestbook</h1>
<p>Thank you for visiting. Sign the guestbook!</p>
<hr>
<!--begin-->
</body></html>
`

// appsConf serves the scripts for data directory data as /cgi-bin/NAME.
func appsConf(data string) func(tmp string) (string, error) {
	scripts := map[string][]byte{}
	for name, s := range appScripts {
		scripts[name] = []byte(strings.ReplaceAll(s, "@DIR@", data))
	}
	return cgiBinConf(scripts)
}

// cgiApp is one row: reset puts its data back (through the target,
// untimed), load sends n requests to Apache at addr, check verifies
// the data afterwards.
type cgiApp struct {
	name  string
	conns int
	reset func(data string) error
	load  func(ctx context.Context, addr string, n int) error
	check func(data string, n int) error
}

var cgiApps = []cgiApp{
	{"cgi-guestbook", appsCGIConns, resetGuestbook, postAll("guestbook"), checkGuestbook},
	{"cgi-hits", appsCGIConns, resetFile(hitsFile, "0\n"), getAll("hits"), checkFileCount(hitsFile)},
	{"cgi-dbm", appsCGIConns, resetDBM, getAll("dbm"), checkDBM},
	{"cgi-log", appsCGIConns, resetFile(logFile, ""), getAll("log"), checkLog},
	{"static-79k", apacheConns, nil, getStatic, nil},
}

// appsSetup makes the data directory through the target, for www-data,
// with the static page.
func appsSetup(data string) error {
	www, err := wwwData()
	if err != nil {
		return err
	}
	if err := os.Mkdir(data, 0o755); err != nil {
		return err
	}
	if err := os.Chown(data, int(www.Uid), int(www.Gid)); err != nil {
		return err
	}
	return writeFile(filepath.Join(data, apachePage), syscall.O_CREAT|syscall.O_TRUNC, pageInto(nil, 0))
}

// resetFile writes content to name, owned by www-data.
func resetFile(name, content string) func(data string) error {
	return func(data string) error {
		p := filepath.Join(data, name)
		if err := writeFile(p, syscall.O_CREAT|syscall.O_TRUNC, []byte(content)); err != nil {
			return err
		}
		www, err := wwwData()
		if err != nil {
			return err
		}
		return os.Chown(p, int(www.Uid), int(www.Gid))
	}
}

var resetGuestbook = resetFile(guestbookPage, guestbookInit)

// resetDBM removes the GDBM file: the first request creates it.
func resetDBM(data string) error {
	if err := os.Remove(filepath.Join(data, dbmFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// checkKept compares a count kept with the requests made.
func checkKept(what string, got, want int) error {
	switch {
	case got < want:
		return lostError{want - got}
	case got > want:
		return fmt.Errorf("%s holds %d, more than the %d requests", what, got, want)
	}
	return nil
}

func checkGuestbook(data string, n int) error {
	b, err := os.ReadFile(filepath.Join(data, guestbookPage))
	if err != nil {
		return err
	}
	if !strings.HasSuffix(string(b), "</body></html>\n") {
		return fmt.Errorf("%s: not a whole page (%d bytes)", guestbookPage, len(b))
	}
	return checkKept(guestbookPage, guestbookEntries(string(b)), n)
}

// guestbookEntries counts the entries in a guestbook page.
func guestbookEntries(page string) int { return strings.Count(page, entryMark) }

func checkFileCount(name string) func(data string, n int) error {
	return func(data string, n int) error {
		got, err := readCount(filepath.Join(data, name))
		if err != nil {
			return err
		}
		return checkKept(name, got, n)
	}
}

// checkDBM reads the count out of the GDBM file with Perl.
func checkDBM(data string, n int) error {
	out, err := perlOutput(`use GDBM_File; tie(my %h, 'GDBM_File', $ARGV[0], &GDBM_READER, 0) or die "tie: $!"; print $h{hits} + 0, "\n";`,
		filepath.Join(data, dbmFile))
	if err != nil {
		return err
	}
	got, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		return fmt.Errorf("%s: count %q", dbmFile, out)
	}
	return checkKept(dbmFile, got, n)
}

func checkLog(data string, n int) error {
	b, err := os.ReadFile(filepath.Join(data, logFile))
	if err != nil {
		return err
	}
	lines, bad := logLines(string(b))
	if bad > 0 {
		return fmt.Errorf("%s: %d torn lines of %d", logFile, bad, lines+bad)
	}
	return checkKept(logFile, lines, n)
}

// logLines counts the log's whole lines and the others (torn or
// interleaved appends).
func logLines(s string) (whole, bad int) {
	for l := range strings.SplitAfterSeq(s, "\n") {
		switch {
		case l == "":
		case strings.HasSuffix(l, logLineEnd+"\n") && strings.Count(l, logLineEnd) == 1:
			whole++
		default:
			bad++
		}
	}
	return whole, bad
}

// getAll sends n GETs of /cgi-bin/script over appsCGIConns connections.
func getAll(script string) func(ctx context.Context, addr string, n int) error {
	return func(ctx context.Context, addr string, n int) error {
		return hammer(ctx, n, appsCGIConns, func(c *http.Client, i int) error {
			return drained(c.Get(fmt.Sprintf("http://%s/cgi-bin/%s?r%d", addr, script, i)))
		})
	}
}

// postAll sends n form POSTs to /cgi-bin/script.
func postAll(script string) func(ctx context.Context, addr string, n int) error {
	return func(ctx context.Context, addr string, n int) error {
		return hammer(ctx, n, appsCGIConns, func(c *http.Client, i int) error {
			form := url.Values{"realname": {fmt.Sprintf("Visitor %d", i)}, "comment": {fmt.Sprintf("Nice site! (%d)", i)}}
			return drained(c.PostForm(fmt.Sprintf("http://%s/cgi-bin/%s", addr, script), form))
		})
	}
}

// getStatic fetches the static page n times over apacheConns
// connections: every response must be the whole page.
func getStatic(ctx context.Context, addr string, n int) error {
	var c apacheCounts
	fetchAll(ctx, addr, "/"+appsDir+"/"+apachePage, n, apacheConns, wholePages, &c)
	if f := c.failed.Load(); f > 0 {
		return fmt.Errorf("%d of %d requests failed, first: %v", f, n, c.firstFail.Load())
	}
	if cut := c.cut(); cut > 0 {
		return fmt.Errorf("%d of %d responses cut short", cut, n)
	}
	return checkKept("static responses", int(c.whole.Load()), n)
}

// hammer makes n requests with conns clients at once; the first
// failure is returned with how many failed.
func hammer(ctx context.Context, n, conns int, do func(c *http.Client, i int) error) error {
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: conns}}
	defer client.CloseIdleConnections()
	var next, failed atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n) && ctx.Err() == nil; i = next.Add(1) {
				if err := do(client, int(i)); err != nil {
					failed.Add(1)
					first.CompareAndSwap(nil, err.Error())
				}
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		return fmt.Errorf("%d of %d requests failed, first: %v", f, n, first.Load())
	}
	return ctx.Err()
}

// perlOutput runs a Perl program and returns its standard output.
func perlOutput(prog string, args ...string) (string, error) {
	var stderr strings.Builder
	cmd := exec.Command("perl", append([]string{"-e", prog}, args...)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("perl: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}
