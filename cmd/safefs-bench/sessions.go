package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	safefs "github.com/safefs/safefs/fs"
)

// The read-modify-write session rows (docs/sessions.md).
//
// servlet: one JVM, servletThreads request threads x
// cfg.servletRuns, each Files.readAllLines, add one, Files.write with
// TRUNCATE_EXISTING, no lock: the count kept. One learning request (one
// thread, one round) comes first, untimed, on every target.
//
// cgi-views and cgi-bbs: Apache (mod_cgid) runs a Perl CGI
// script that shows a count on GET and adds one on POST (the naive
// read-modify-write), rendering for a while after it (a sleep: time
// spent waiting, not computing, as a page's database or template
// would); five POSTs first, untimed (on safefs they teach rmw=auto the
// script). cgi-views: then cfg.viewsN GETs of 100 ms, cgiConns at a
// time. cgi-bbs: then cfg.bbsN requests of 20 ms, one POST in ten,
// cgiConns at a time; its second row is the posts kept, which must be
// all of them on a safefs target with sessions.

const (
	servletThreads = 8
	bbsData        = "bbs.txt"
	bbsLearn       = 5 // POSTs before the timed part
)

var errNoJava = errors.New("javac not installed")

// servletJava is the servlet's request loop (testfs/java/RMWServlet.java).
const servletJava = `import java.nio.file.*;
import java.util.*;
import java.util.concurrent.*;

public class RMWServlet {
    public static void main(String[] args) throws Exception {
        Path p = Paths.get(args[0]);
        int threads = Integer.parseInt(args[1]), rounds = Integer.parseInt(args[2]);
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        List<Future<?>> done = new ArrayList<>();
        for (int i = 0; i < threads; i++) {
            done.add(pool.submit(() -> {
                for (int r = 0; r < rounds; r++) {
                    List<String> lines = Files.readAllLines(p);
                    if (lines.size() != 1 || !lines.get(0).matches("[0-9]+")) {
                        continue; // torn: the request fails
                    }
                    int n = Integer.parseInt(lines.get(0));
                    Files.write(p, List.of(Integer.toString(n + 1)), StandardOpenOption.TRUNCATE_EXISTING);
                }
                return null;
            }));
        }
        for (Future<?> f : done) {
            f.get();
        }
        pool.shutdown();
    }
}
`

// servletSetup compiles the servlet into the target's own directory
// (outside its mount) and writes the count.
func servletSetup(e *env) error {
	if _, err := exec.LookPath("javac"); err != nil {
		return errNoJava
	}
	dir := filepath.Join(e.root, "servlet")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	src := filepath.Join(dir, "RMWServlet.java")
	if err := os.WriteFile(src, []byte(servletJava), 0o644); err != nil {
		return err
	}
	if out, err := exec.CommandContext(e.ctx, "javac", "-d", dir, src).CombinedOutput(); err != nil {
		return fmt.Errorf("javac: %w: %s", err, out)
	}
	return counterSetup(e)
}

func (e *env) servlet(threads, rounds int) error {
	cmd := exec.CommandContext(e.ctx, "java", "-XX:-UsePerfData", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx64m",
		"-cp", filepath.Join(e.root, "servlet"), "RMWServlet", e.path("count"), strconv.Itoa(threads), strconv.Itoa(rounds))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("servlet: %w: %s", err, out)
	}
	return nil
}

// servletRun returns the updates the timed part kept.
func servletRun(e *env) (float64, error) {
	learning, err := e.servletLearn()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := e.servlet(servletThreads, e.cfg.servletRuns); err != nil {
		return 0, err
	}
	e.secs = time.Since(start).Seconds()
	n, err := readCount(e.path("count"))
	e.extra = fmt.Sprintf("%.2f s", e.secs)
	return float64(n - learning), err
}

// servletLearn makes learning requests (one thread, one round) until
// safefs has learned the pair, up to three (learning reads /proc within
// a bound and learns nothing from a request it could not tell about,
// which a loaded machine may cause); one on targets without sessions. It returns
// the requests made.
func (e *env) servletLearn() (int, error) {
	learned := filepath.Join(filepath.Dir(e.raw), safefs.InternalDir, "rmw-learned")
	for n := 1; ; n++ {
		if err := e.servlet(1, 1); err != nil {
			return n, err
		}
		b, _ := os.ReadFile(learned)
		if !isSafefs(e.target) || e.target == "safefs-rmw-off" || bytes.Contains(b, []byte(strconv.Quote(filepath.Base(e.dir)+"/count"))) || n == 3 {
			return n, nil
		}
	}
}

func servletTotal(c config) float64 { return float64(servletThreads * c.servletRuns) }

func servletTitle(c config) string {
	return fmt.Sprintf("servlet, %d threads x %d: kept / expected", servletThreads, c.servletRuns)
}

func servletTimeTitle(c config) string { return "servlet: time" }

// bbsScript is the CGI script: %[1]q the data file, %[2]s the render
// time in seconds.
const bbsScript = `#!/usr/bin/perl
my $file = %[1]q;
open(IN, "<$file") or die "open <$file: $!\n";
my $n = <IN>;
close(IN);
chomp $n;
if (($ENV{REQUEST_METHOD} // '') eq 'POST') {
    read(STDIN, my $form, $ENV{CONTENT_LENGTH} || 0);
    $n++;
    open(OUT, ">$file") or die "open >$file: $!\n";
    print OUT "$n\n";
    close(OUT) or die "close $file: $!\n";
}
select(undef, undef, undef, %[2]s);
print "Content-Type: text/plain\n\n$n\n";
`

func bbsSetup(e *env) error {
	if _, err := apacheBin(); err != nil {
		return err
	}
	www, err := wwwData()
	if err != nil {
		return err
	}
	p := e.path(bbsData)
	if err := writeFile(p, syscall.O_CREAT|syscall.O_TRUNC, []byte("0\n")); err != nil {
		return err
	}
	return os.Chown(p, int(www.Uid), int(www.Gid))
}

// bbsConf serves the script as /cgi-bin/bbs.
func bbsConf(data string, render time.Duration) func(tmp string) (string, error) {
	script := fmt.Appendf(nil, bbsScript, data, strconv.FormatFloat(render.Seconds(), 'f', -1, 64))
	return cgiBinConf(map[string][]byte{"bbs": script})
}

// bbsRun starts Apache, makes the learning POSTs, then times n requests
// (post(i): request i is a POST) cgiConns at a time. It returns the
// POSTs of the timed part.
func bbsRun(e *env, render time.Duration, n int, post func(i int) bool) (int, error) {
	srv, err := startApacheWith(e.ctx, e.dir, bbsConf(e.path(bbsData), render))
	if err != nil {
		return 0, err
	}
	defer srv.stop()
	var c apacheCounts
	bbsRequests(srv.addr, bbsLearn, 1, func(int) bool { return true }, &c)
	start := time.Now()
	posts := bbsRequests(srv.addr, n, cgiConns, post, &c)
	e.secs = time.Since(start).Seconds()
	log := srv.errorLog()
	if err := srv.stop(); err != nil {
		return 0, err
	}
	if k := c.failed.Load(); k > 0 {
		return 0, fmt.Errorf("%d of %d requests failed, first: %v%s", k, bbsLearn+n, c.firstFail.Load(), log)
	}
	return posts, nil
}

// bbsRequests sends n requests over conns keep-alive connections and
// returns the POSTs among them; any answer but 200 is a failure.
func bbsRequests(addr string, n, conns int, post func(i int) bool, c *apacheCounts) int {
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: conns}}
	defer client.CloseIdleConnections()
	url := "http://" + addr + "/cgi-bin/bbs"
	var next, posts atomic.Int64
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				var resp *http.Response
				var err error
				if post(int(i)) {
					posts.Add(1)
					resp, err = client.Post(url, "application/x-www-form-urlencoded", strings.NewReader("msg=hello"))
				} else {
					resp, err = client.Get(url)
				}
				if err = drained(resp, err); err != nil {
					c.fail(err)
					continue
				}
				c.whole.Add(1)
			}
		})
	}
	wg.Wait()
	return int(posts.Load())
}

// viewsRun: the five POSTs, then the timed GETs; views per second.
func viewsRun(e *env) (float64, error) {
	if _, err := bbsRun(e, 100*time.Millisecond, e.cfg.viewsN, func(int) bool { return false }); err != nil {
		return 0, err
	}
	if err := e.postsKept(0); err != nil {
		return 0, err
	}
	return float64(e.cfg.viewsN), nil
}

// mixedRun: the five POSTs, then one POST in ten; requests per second.
func mixedRun(e *env) (float64, error) {
	posts, err := bbsRun(e, 20*time.Millisecond, e.cfg.bbsN, func(i int) bool { return i%10 == 9 })
	if err != nil {
		return 0, err
	}
	if err := e.postsKept(posts); err != nil {
		return 0, err
	}
	return float64(e.cfg.bbsN), nil
}

// postsKept checks the count after the learning POSTs and posts more:
// the extra cell says how many were kept. Losing one is an error on a
// safefs target with sessions (all but safefs-rmw-off).
func (e *env) postsKept(posts int) error {
	n, err := readCount(e.path(bbsData))
	if err != nil {
		return err
	}
	kept := n - bbsLearn
	e.extra = fmt.Sprintf("%d/%d", kept, posts)
	if kept != posts && isSafefs(e.target) && e.target != "safefs-rmw-off" {
		return fmt.Errorf("%w: %d of %d posts kept", errLostUpdates, kept, posts)
	}
	return nil
}

func viewsTitle(c config) string {
	return fmt.Sprintf("cgi-views: 5 posts, then %d views of 100 ms, %d at a time", c.viewsN, cgiConns)
}

func mixedTitle(c config) string {
	return fmt.Sprintf("cgi-bbs: 5 posts, then %d requests of 20 ms, 1 post in 10, %d at a time", c.bbsN, cgiConns)
}

func mixedPostsTitle(c config) string { return "cgi-bbs: posts kept / posts" }
