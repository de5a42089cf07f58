package main

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The guestbook-page workload: Apache (mod_cgid) runs a Perl guestbook
// CGI script written the way NMS's guestbook.pl (the maintained
// replacement for Matt's Script Archive's) rewrites its page: flock a
// lock file opened ">>", copy the page line by line into a temporary
// file with the new entry inserted after <!--begin-->, rename it over
// the page. guestbookPosters clients POST entries while one client
// fetches the page (a static file Apache serves) cfg.guestbookN times.
// The row is posts/s; its second row counts the fetches that were not
// one whole version (apacheCounts): Apache takes the length from a stat
// by name, then opens the name, and a rename between the two gives it
// another version.

const (
	guestbookPosters = 32
	gbPageFile       = "guestbook.html"
	guestbookSeed    = 100 // entries the page starts with
)

// guestbookScript is the CGI script; %q is the page's path. Each entry
// is about 300 bytes; the trailer counts the entries so that a fetch
// can tell a whole version from a cut one.
const guestbookScript = `#!/usr/bin/perl
use strict;
use Fcntl qw(:flock);
my $file = %q;
read(STDIN, my $form, $ENV{CONTENT_LENGTH} || 0);
my ($name) = $form =~ /name=([\w.-]*)/;
open(my $lock, ">>", "$file.lck") or die "open $file.lck: $!\n";
flock($lock, LOCK_EX) or die "flock $file.lck: $!\n";
open(my $tmp, ">", "$file.tmp") or die "open >$file.tmp: $!\n";
open(my $in, "<", $file) or die "open <$file: $!\n";
my $n;
while (my $line = <$in>) {
    if ($line =~ /^<!-- entries: (\d+) -->$/) {
        $n = $1 + 1;
        $line = "<!-- entries: $n -->\n";
    }
    print $tmp $line;
    if ($line =~ /^<!--begin-->$/) {
        print $tmp "<!--entry--><b>$name</b> &lt;$name\@example.org&gt;<br />\n",
            ("Thank you for the lovely site, it is a pleasure to visit. " x 4), "<hr />\n";
    }
}
close($in);
close($tmp) or die "close $file.tmp: $!\n";
rename("$file.tmp", $file) or die "rename $file.tmp: $!\n";
close($lock);
print "Content-Type: text/html\n\n<p>Thank you, $name: entry $n.</p>\n";
`

// guestbookInitial is the page with guestbookSeed entries, as the script
// writes them.
func guestbookInitial() []byte {
	var b bytes.Buffer
	b.WriteString("<html>\n<head><title>Guestbook</title></head>\n<body>\n<h1>Guestbook</h1>\n<!--begin-->\n")
	for i := range guestbookSeed {
		fmt.Fprintf(&b, "<!--entry--><b>seed%d</b> &lt;seed%d@example.org&gt;<br />\n%s<hr />\n", i, i,
			strings.Repeat("Thank you for the lovely site, it is a pleasure to visit. ", 4))
	}
	fmt.Fprintf(&b, "<!-- entries: %d -->\n</body>\n</html>\n", guestbookSeed)
	return b.Bytes()
}

var guestbookTrailer = regexp.MustCompile(`\n<!-- entries: ([0-9]+) -->\n</body>\n</html>\n$`)

// gbPageEntries is the entry count of a whole version of the page:
// its trailer's, which must match the entries in it; -1 if it is not one.
func gbPageEntries(body []byte) int {
	m := guestbookTrailer.FindSubmatch(body)
	if m == nil {
		return -1
	}
	n, err := strconv.Atoi(string(m[1]))
	if err != nil || bytes.Count(body, []byte("<!--entry-->")) != n {
		return -1
	}
	return n
}

// guestbookSetup writes the page through the target and gives it and
// the directory to www-data, the script's user (it makes its lock and
// temporary files there).
func guestbookSetup(e *env) error {
	if _, err := apacheBin(); err != nil {
		return err
	}
	www, err := wwwData()
	if err != nil {
		return err
	}
	p := e.path(gbPageFile)
	if err := writeFile(p, os.O_CREATE|os.O_TRUNC, guestbookInitial()); err != nil {
		return err
	}
	for _, q := range []string{p, e.dir} {
		if err := os.Chown(q, int(www.Uid), int(www.Gid)); err != nil {
			return err
		}
	}
	return nil
}

// guestbookRun posts while one client fetches the page; it returns the
// posts made in the fetches' time (a rate), and e.extra gets the
// cut-short cell. Every post must be on the page at the end.
func guestbookRun(e *env) (float64, error) {
	script := fmt.Appendf(nil, guestbookScript, e.path(gbPageFile))
	srv, err := startApacheWith(e.ctx, e.dir, cgiBinConf(map[string][]byte{"guestbook": script}))
	if err != nil {
		return 0, err
	}
	defer srv.stop()
	var c, pc apacheCounts
	done := make(chan struct{})
	var posts atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := range guestbookPosters {
		wg.Go(func() { guestbookPost(srv.addr, i, done, &posts, &pc) })
	}
	fetchAll(e.ctx, srv.addr, "/"+gbPageFile, e.cfg.guestbookN, 1, func() func([]byte) bool { return guestbookWhole }, &c)
	close(done)
	e.secs = time.Since(start).Seconds()
	timed := posts.Load()
	wg.Wait()
	log := srv.errorLog()
	if err := srv.stop(); err != nil {
		return 0, err
	}
	for _, k := range []*apacheCounts{&pc, &c} {
		if n := k.failed.Load(); n > 0 {
			return 0, fmt.Errorf("%d requests failed, first: %v%s", n, k.firstFail.Load(), log)
		}
	}
	b, err := os.ReadFile(e.path(gbPageFile))
	if err != nil {
		return 0, err
	}
	if got := gbPageEntries(b) - guestbookSeed; got != int(posts.Load()) {
		return 0, fmt.Errorf("%w: %d entries on the page after %d posts", errLostUpdates, got, posts.Load())
	}
	cut, fetched := c.cut(), c.whole.Load()+c.cut()
	e.extra = fmt.Sprintf("%.2f %% (%d/%d: %d dropped, %d short, %d torn; %d posts)",
		100*float64(cut)/float64(max(fetched, 1)), cut, fetched, c.dropped.Load(), c.short.Load(), c.torn.Load(), posts.Load())
	return float64(timed), nil
}

// guestbookWhole reports whether body is one whole version of the page.
func guestbookWhole(body []byte) bool { return gbPageEntries(body) >= 0 }

// guestbookPost posts entries as client i until done, a connection per
// post as ab makes them (a POST is not resent when a kept-alive
// connection closes under it); a post counts once its answer is in, so
// the posts counted are on the page.
func guestbookPost(addr string, i int, done <-chan struct{}, posts *atomic.Int64, c *apacheCounts) {
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
	url := "http://" + addr + "/cgi-bin/guestbook"
	for k := 0; ; k++ {
		select {
		case <-done:
			return
		default:
		}
		form := fmt.Sprintf("name=c%d-%d&comments=hello", i, k)
		if err := drained(client.Post(url, "application/x-www-form-urlencoded", strings.NewReader(form))); err != nil {
			c.fail(err)
			return
		}
		posts.Add(1)
	}
}

func guestbookCutTitle(c config) string {
	return fmt.Sprintf("guestbook-page: cut short / %d fetches", c.guestbookN)
}
