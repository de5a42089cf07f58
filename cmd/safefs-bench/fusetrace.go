package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// With -fusetrace the commit rows run once more, untimed, while the
// kernel's FUSE tracepoints (fuse:fuse_request_send, fuse_request_end)
// record the requests of the target's connection: how many of each kind
// a commit sends, and how long each takes from the kernel's send to its
// end, which is what the caller waits for. Neither process is traced, so
// unlike strace this does not stretch what it measures. The trace
// buffer is the kernel's own: two runs at once would mix their events.

const tracefs = "/sys/kernel/tracing"

var fuseEvents = []string{"fuse/fuse_request_send", "fuse/fuse_request_end"}

// fuseOps is the latency in µs of each request, by kind.
type fuseOps map[string][]float64

// traceFUSE runs fn with the FUSE tracepoints on and returns the
// requests of the connection that serves dir.
func traceFUSE(dir string, fn func() error) (fuseOps, error) {
	conn, err := connectionOf(dir)
	if err != nil {
		return nil, err
	}
	if err := openTracefs(); err != nil {
		return nil, err
	}
	set := func(file, v string) error { return os.WriteFile(filepath.Join(tracefs, file), []byte(v), 0) }
	steps := []error{set("tracing_on", "0"), set("trace", ""), set("buffer_size_kb", "16384")}
	for _, e := range fuseEvents {
		steps = append(steps, set("events/"+e+"/enable", "1"))
	}
	defer func() {
		_ = set("tracing_on", "0")
		for _, e := range fuseEvents {
			_ = set("events/"+e+"/enable", "0")
		}
	}()
	if err := errors.Join(append(steps, set("tracing_on", "1"))...); err != nil {
		return nil, fmt.Errorf("tracefs: %w", err)
	}
	runErr := fn()
	if err := set("tracing_on", "0"); err != nil || runErr != nil {
		return nil, errors.Join(runErr, err)
	}
	b, err := os.ReadFile(filepath.Join(tracefs, "trace"))
	if err != nil {
		return nil, err
	}
	return parseFUSETrace(string(b), conn)
}

// openTracefs mounts tracefs if it is not there yet.
func openTracefs() error {
	if _, err := os.Stat(filepath.Join(tracefs, "events/fuse")); err == nil {
		return nil
	}
	if err := unix.Mount("nodev", tracefs, "tracefs", 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("mount tracefs on %s: %w", tracefs, err)
	}
	if _, err := os.Stat(filepath.Join(tracefs, "events/fuse")); err != nil {
		return fmt.Errorf("no FUSE tracepoints: %w", err)
	}
	return nil
}

// connectionOf is the FUSE connection serving dir as the tracepoints
// name it: the kernel's dev_t of its superblock (major << 20 | minor).
func connectionOf(dir string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return 0, err
	}
	return uint64(unix.Major(st.Dev))<<20 | uint64(unix.Minor(st.Dev)), nil
}

var fuseLine = regexp.MustCompile(`\s(\d+\.\d+): fuse_request_(send|end): connection (\d+) req (\d+)(?: opcode \d+ \(FUSE_(\w+)\))?`)

// parseFUSETrace pairs the send and end lines of connection conn by
// request id.
func parseFUSETrace(s string, conn uint64) (fuseOps, error) {
	type sent struct {
		at float64
		op string
	}
	pending := map[string]sent{}
	ops := fuseOps{}
	for _, l := range strings.Split(s, "\n") {
		m := fuseLine.FindStringSubmatch(l)
		if m == nil || m[3] != strconv.FormatUint(conn, 10) {
			continue
		}
		at, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			return nil, fmt.Errorf("trace line %q: %w", l, err)
		}
		if m[2] == "send" {
			pending[m[4]] = sent{at, m[5]}
		} else if p, ok := pending[m[4]]; ok {
			delete(pending, m[4])
			ops[p.op] = append(ops[p.op], (at-p.at)*1e6)
		}
	}
	if len(ops) == 0 {
		return nil, fmt.Errorf("no FUSE requests of connection %d traced", conn)
	}
	return ops, nil
}

// count is the requests traced, of every kind.
func (o fuseOps) count() int {
	n := 0
	for _, v := range o {
		n += len(v)
	}
	return n
}

// byTime lists the kinds, most time per commit first, each with its
// requests per commit and median latency.
func (o fuseOps) byTime(commits float64) string {
	total := func(v []float64) (t float64) {
		for _, x := range v {
			t += x
		}
		return t
	}
	kinds := make([]string, 0, len(o))
	for k := range o {
		kinds = append(kinds, k)
	}
	slices.SortFunc(kinds, func(a, b string) int {
		if ta, tb := total(o[a]), total(o[b]); ta != tb {
			if ta > tb {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range kinds {
		v := slices.Sorted(slices.Values(o[k]))
		parts = append(parts, fmt.Sprintf("%s %.2f x %.0f µs", k, float64(len(v))/commits, v[len(v)/2]))
	}
	return strings.Join(parts, ", ")
}

// writeFUSETrace prints -fusetrace's table: per commit, the requests of
// each FUSE target, then their kinds with their median latencies.
func writeFUSETrace(w io.Writer, ws []workload, ts []*target, res map[string]map[string]result, markdown bool) {
	var traced []*target
	for _, t := range ts {
		if t.unmount != nil {
			traced = append(traced, t)
		}
	}
	legend := "\nrequests by kind, most time first: per commit x median µs from the kernel's send to the reply:"
	writeCommitTable(w, "per commit (FUSE tracepoints)", ws, traced, markdown, legend, func(wl workload, t *target) (string, string) {
		r := res[wl.name][t.name]
		switch {
		case r.opsErr != nil:
			return errCell(r.opsErr), ""
		case r.ops == nil || r.opsCommits <= 0:
			return "-", ""
		}
		return fmt.Sprintf("%.1f requests", float64(r.ops.count())/r.opsCommits), r.ops.byTime(r.opsCommits)
	})
}
