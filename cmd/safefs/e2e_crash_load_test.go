package main

// Crash-load test: the daemon is killed with SIGKILL at a random moment
// (after the round's first acknowledged commit of each kind) under a
// concurrent Perl workload (testdata/crashload.pl), round after round;
// after each, `safefs recover` must leave only whole versions, and every
// commit whose close() returned success must be there.

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The workload's shape: crashload.pl's C A L R.
const (
	loadCounters  = 2 // two workers each
	loadAppenders = 3
	loadLogs      = 2
	loadRewriters = 2
)

func loadShape() []string {
	return []string{strconv.Itoa(loadCounters), strconv.Itoa(loadAppenders),
		strconv.Itoa(loadLogs), strconv.Itoa(loadRewriters)}
}

// rwVersion names one version a rewriter wrote.
type rwVersion struct {
	Tag string
	Ver int
}

// acks is what the workload reported: commits whose close() succeeded.
type acks struct {
	Counter map[string][]int          // counter file: values written, in order of report
	Append  map[string]int            // appender id: highest sequence number
	Log     map[string]string         // appender id: its log
	Rewrite map[string]rwVersion      // rewriter file: last version
	Ino     map[string]map[string]int // counter file: st_ino seen by the workers: count
}

func newAcks() acks {
	return acks{Counter: map[string][]int{}, Append: map[string]int{}, Log: map[string]string{},
		Rewrite: map[string]rwVersion{}, Ino: map[string]map[string]int{}}
}

func (a acks) clone() acks {
	c := newAcks()
	for k, v := range a.Counter {
		c.Counter[k] = slices.Clone(v)
	}
	for k, v := range a.Append {
		c.Append[k] = v
	}
	for k, v := range a.Log {
		c.Log[k] = v
	}
	for k, v := range a.Rewrite {
		c.Rewrite[k] = v
	}
	for k, v := range a.Ino {
		c.Ino[k] = maps.Clone(v)
	}
	return c
}

// loadOutput parses the workload's lines as they come. Lines reporting a
// failure before the test broke the daemon on purpose are errors.
type loadOutput struct {
	lineBuffer // its mu guards the fields below too
	acks       acks
	broken     bool     // the test killed or stopped the daemon
	early      []string // ERR lines before that
	badLine    []string // BAD and unparsable lines
}

func newLoadOutput() *loadOutput {
	o := &loadOutput{acks: newAcks()}
	o.onLine = o.line
	return o
}

func (o *loadOutput) line(l string) {
	f := strings.Fields(l)
	switch {
	case len(f) == 5 && f[0] == "ACK" && f[1] == "counter":
		v, err := strconv.Atoi(f[3])
		if err == nil {
			o.acks.Counter[f[2]] = append(o.acks.Counter[f[2]], v)
			if o.acks.Ino[f[2]] == nil {
				o.acks.Ino[f[2]] = map[string]int{}
			}
			o.acks.Ino[f[2]][f[4]]++
			return
		}
	case len(f) == 5 && f[0] == "ACK" && f[1] == "append":
		seq, err := strconv.Atoi(f[4])
		if err == nil {
			if seq != o.acks.Append[f[3]]+1 {
				o.badLine = append(o.badLine, "out of order: "+l)
			}
			o.acks.Append[f[3]], o.acks.Log[f[3]] = seq, f[2]
			return
		}
	case len(f) == 5 && f[0] == "ACK" && f[1] == "rewrite":
		ver, err := strconv.Atoi(f[4])
		if err == nil {
			o.acks.Rewrite[f[2]] = rwVersion{f[3], ver}
			return
		}
	case len(f) >= 1 && f[0] == "ERR":
		if !o.broken {
			o.early = append(o.early, l)
		}
		return
	case l == "DONE":
		return
	}
	o.badLine = append(o.badLine, l)
}

// breakNow marks the moment the test kills or stops the daemon.
func (o *loadOutput) breakNow() acks {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.broken = true
	return o.acks.clone()
}

func (o *loadOutput) snapshot() acks {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.acks.clone()
}

// checkHealthy fails on BAD or unparsable lines and on errors before the
// daemon was broken.
func (o *loadOutput) checkHealthy(t *testing.T) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	assert.Empty(t, o.badLine, "the workload saw torn data or printed nonsense")
	assert.Empty(t, o.early, "workers failed while the daemon was running")
}

// startLoad runs `crashload.pl run` in the mount. Its cleanup stops the
// master with SIGTERM, which kills the workers (by pid).
func startLoad(t *testing.T, mnt, tag string, seconds int) (*proc, *loadOutput) {
	t.Helper()
	out := newLoadOutput()
	args := append([]string{testdataPath(t, "crashload.pl"), "run", mnt, tag, strconv.Itoa(seconds)}, loadShape()...)
	cmd := exec.Command("perl", args...)
	cmd.Stdout, cmd.Stderr = out, out
	p := startProc(t, cmd)
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.exited:
			case <-time.After(waitLimit):
			}
		}
	})
	return p, out
}

// setupLoad creates the workload's files through a normal mount.
func setupLoad(t *testing.T, backing, mnt string) {
	t.Helper()
	p := startMountWith(t, backing, mnt, "")
	args := append([]string{testdataPath(t, "crashload.pl"), "setup", mnt}, loadShape()...)
	out := startProc(t, exec.Command("perl", args...)).wait(t)
	require.Equal(t, "DONE\n", out)
	stopMount(t, p)
}

// loadState is what the files in a backing directory hold.
type loadState struct {
	Counter map[string]int       // value
	Append  map[string][]int     // appender id: its sequence numbers, in log order
	Rewrite map[string]rwVersion // file: version
}

var (
	counterRE = regexp.MustCompile(`\A(\d+)\n\z`)
	logLineRE = regexp.MustCompile(`\A(\S+) s=(\d+) l=([123])/3 -{40}\z`)
	chunkRE   = regexp.MustCompile(`\A(\S+) ver=(\d{6}) chunk=(\d{3}) ([a-z])+\n\z`)
	sumRE     = regexp.MustCompile(`\ASUM (\S+) (\d{6}) ([0-9a-f]{32})\n\z`)
)

// readLoadState reads and checks every workload file in dir: each
// counter a whole number, each log whole entries, each rewriter file a
// whole self-consistent version. Violations are test errors.
func readLoadState(t *testing.T, dir string) loadState {
	t.Helper()
	s := loadState{Counter: map[string]int{}, Append: map[string][]int{}, Rewrite: map[string]rwVersion{}}
	for i := range loadCounters {
		name := fmt.Sprintf("counter%d", i)
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		m := counterRE.FindSubmatch(b)
		if !assert.NotNil(t, m, "%s holds %q, not a whole number", name, b) {
			continue
		}
		s.Counter[name], _ = strconv.Atoi(string(m[1]))
	}
	for i := range loadLogs {
		name := fmt.Sprintf("log%d", i)
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		checkLog(t, name, b, s.Append)
	}
	for i := range loadRewriters {
		name := fmt.Sprintf("rw%d", i)
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		if v, ok := checkRewrite(t, name, b); ok {
			s.Rewrite[name] = v
		}
	}
	return s
}

// checkLog requires whole 3-line entries, each appender's entries in
// sequence 1, 2, 3, ... with no gap and no duplicate.
func checkLog(t *testing.T, name string, b []byte, seqs map[string][]int) {
	t.Helper()
	if len(b) > 0 && !assert.Equal(t, byte('\n'), b[len(b)-1], "%s ends in a torn line", name) {
		return
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(b) == 0 {
		lines = nil
	}
	for i := 0; i < len(lines); i += 3 {
		var id string
		var seq int
		for k := 0; k < 3; k++ {
			if !assert.Less(t, i+k, len(lines), "%s ends in a partial entry", name) {
				return
			}
			m := logLineRE.FindStringSubmatch(lines[i+k])
			if !assert.NotNil(t, m, "%s line %d is torn: %q", name, i+k+1, lines[i+k]) {
				return
			}
			n, _ := strconv.Atoi(m[2])
			if k == 0 {
				id, seq = m[1], n
			}
			if !assert.True(t, m[1] == id && n == seq && m[3] == strconv.Itoa(k+1),
				"%s line %d: %q is not line %d of entry %s s=%d: entries interleaved or torn",
				name, i+k+1, lines[i+k], k+1, id, seq) {
				return
			}
		}
		if want := len(seqs[id]) + 1; !assert.Equal(t, want, seq, "%s: %s's entry %d follows entry %d: a gap or a duplicate",
			name, id, seq, want-1) {
			return
		}
		seqs[id] = append(seqs[id], seq)
	}
}

// checkRewrite requires a whole version: 16 chunks of one tag and
// version, then the SUM line with their md5.
func checkRewrite(t *testing.T, name string, b []byte) (rwVersion, bool) {
	t.Helper()
	const chunks, chunk = 16, 4096
	if !assert.Greater(t, len(b), chunks*chunk, "%s is short: %d bytes", name, len(b)) {
		return rwVersion{}, false
	}
	body, sum := b[:chunks*chunk], b[chunks*chunk:]
	m := sumRE.FindSubmatch(sum)
	if !assert.NotNil(t, m, "%s: bad SUM line %q", name, sum) {
		return rwVersion{}, false
	}
	v := rwVersion{Tag: string(m[1])}
	v.Ver, _ = strconv.Atoi(string(m[2]))
	h := md5.Sum(body)
	ok := assert.Equal(t, string(m[3]), hex.EncodeToString(h[:]), "%s: md5 of the chunks does not match its SUM line", name)
	for j := range chunks {
		c := body[j*chunk : (j+1)*chunk]
		cm := chunkRE.FindSubmatch(c)
		ok = assert.True(t, cm != nil && string(cm[1]) == v.Tag && string(cm[2]) == string(m[2]) &&
			string(cm[3]) == fmt.Sprintf("%03d", j), "%s chunk %d is not of version %s %d: %.60q", name, j, v.Tag, v.Ver, c) && ok
	}
	return v, ok
}

// checkCounterAcks: values reported by the workers are distinct (no lost
// update) and none above what the file holds.
func checkCounterAcks(t *testing.T, a acks, got loadState) {
	t.Helper()
	for name, vals := range a.Counter {
		sorted := slices.Sorted(slices.Values(vals))
		var dups []int
		for i := 1; i < len(sorted); i++ {
			if sorted[i] == sorted[i-1] {
				dups = append(dups, sorted[i])
			}
		}
		assert.Empty(t, dups, "%s: two increments under flock reported the same value (a lost update); st_ino seen: %v",
			name, a.Ino[name])
		if len(sorted) > 0 {
			assert.GreaterOrEqual(t, got.Counter[name], sorted[len(sorted)-1],
				"%s lost an increment whose close() succeeded", name)
		}
	}
}

func crashLoadSeed(t *testing.T) uint64 {
	t.Helper()
	if s := os.Getenv("SAFEFS_CRASHLOAD_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "SAFEFS_CRASHLOAD_SEED")
		return seed
	}
	return uint64(time.Now().UnixNano())
}

func TestCrashLoad(t *testing.T) {
	requireFuse(t)
	requireTool(t, "perl")
	seed := crashLoadSeed(t)
	t.Logf("seed %d (rerun with SAFEFS_CRASHLOAD_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x5afef5))

	backing, mnt := tempDir(t), tempDir(t)
	setupLoad(t, backing, mnt)
	prev := readLoadState(t, backing)
	total := newAcks() // over all rounds
	for round := 1; round <= 5; round++ {
		tag := fmt.Sprintf("r%d", round)
		delay := time.Duration(200+rng.IntN(1300)) * time.Millisecond
		t.Logf("round %d: SIGKILL after %v", round, delay)

		p := startMountWith(t, backing, mnt, "")
		w, out := startLoad(t, mnt, tag, 30)
		// The kill comes a random delay after the round's first commit of
		// each kind is acknowledged, not after the start: on a loaded
		// machine a delay from the start can end before perl has committed
		// anything, and such a round checks no acknowledged commit. (A
		// kill cutting a round's very first commit is left to the crash
		// test, which cuts one commit at every crash point.)
		cptWaitAcked(t, w, out)
		time.Sleep(delay)
		out.breakNow()
		require.NoError(t, p.cmd.Process.Kill())
		waitKilled(t, p)
		w.wait(t) // the workers fail on the dead mount and stop
		unmountIfMounted(t, mnt)
		out.checkHealthy(t)
		a := out.snapshot()
		for name, inos := range a.Ino {
			assert.Len(t, inos, 1, "%s had several inode numbers within one mount (st_ino: count): "+
				"the kernel saw two inodes for one path, so flock could not exclude", name)
		}
		t.Logf("round %d: acked %d counter, %d append and %d rewrite commits", round,
			countAll(a.Counter), sumAll(a.Append), sumRewrites(a.Rewrite))
		// The minimum: at least one acknowledged commit of each kind the
		// workload makes (a counter increment and a rewrite, both replace
		// commits, and an append), so that a daemon that commits nothing,
		// or never completes one kind, cannot pass: every check below
		// compares the files with the acknowledged commits, and with none
		// they would hold whatever the previous round left. One, not more:
		// any larger count would be a rate, which a loaded machine may
		// not reach. cptWaitAcked waited for these before the kill (and
		// failed the test if they never came); this states the minimum.
		cptRequireAcked(t, fmt.Sprintf("round %d", round), a)

		s := recoverBacking(t, backing)
		t.Logf("round %d: recover %+v", round, s)
		assert.Zero(t, s.Refused, "recovery refused something")
		got := readLoadState(t, backing)
		assertNoDebris(t, backing)
		requireRecoverNoop(t, backing)

		// Counters: the increments acked this round, plus at most the one
		// cut off (flock lets one commit run at a time).
		mergeAcks(&total, a)
		checkCounterAcks(t, total, got)
		for name, v := range got.Counter {
			n := len(a.Counter[name])
			assert.Contains(t, []int{prev.Counter[name] + n, prev.Counter[name] + n + 1}, v,
				"%s: was %d, %d increments acked, now %d", name, prev.Counter[name], n, v)
		}
		// Appenders of this round: every acked entry, plus at most one.
		for i := range loadAppenders {
			id := fmt.Sprintf("%s-a%d", tag, i)
			assert.Contains(t, []int{a.Append[id], a.Append[id] + 1}, len(got.Append[id]),
				"%s: %d entries acked, %d in its log", id, a.Append[id], len(got.Append[id]))
		}
		for id, seqs := range prev.Append {
			assert.Equal(t, seqs, got.Append[id], "%s's entries from an earlier round changed", id)
		}
		// Rewriters: the last acked version or the one after it.
		for name, v := range got.Rewrite {
			last, ok := a.Rewrite[name]
			if !ok {
				last = prev.Rewrite[name]
			}
			nextVer := rwVersion{tag, 1}
			if last.Tag == tag {
				nextVer.Ver = last.Ver + 1
			}
			assert.Contains(t, []rwVersion{last, nextVer}, v, "%s: last acked %v", name, last)
		}
		prev = got
		if t.Failed() {
			t.Fatalf("round %d failed (seed %d); workload output ends:\n%s", round, seed, tail(out.String(), 40))
		}
	}

	// A normal mount serves what recovery left, and commits again.
	p := startMountWith(t, backing, mnt, "")
	through := readLoadState(t, mnt)
	assert.Equal(t, prev, through, "the mount shows other data than BACKING holds")
	w, out := startLoad(t, mnt, "final", 1)
	w.wait(t)
	out.checkHealthy(t)
	assert.True(t, strings.HasSuffix(out.String(), "DONE\n"), "workload output:\n%s", out)
	stopMount(t, p)
	got := readLoadState(t, backing)
	a := out.snapshot()
	mergeAcks(&total, a)
	checkCounterAcks(t, total, got)
	for name, v := range got.Counter {
		assert.Equal(t, prev.Counter[name]+len(a.Counter[name]), v, "%s after a run without crash", name)
	}
	for i := range loadAppenders {
		id := fmt.Sprintf("final-a%d", i)
		assert.Len(t, got.Append[id], a.Append[id], "%s after a run without crash", id)
	}
	for name, v := range got.Rewrite {
		assert.Equal(t, a.Rewrite[name], v, "%s after a run without crash", name)
	}
	assertNoDebris(t, backing)
}

func mergeAcks(total *acks, a acks) {
	for k, v := range a.Counter {
		total.Counter[k] = append(total.Counter[k], v...)
	}
	for k, v := range a.Append {
		total.Append[k] = v
	}
	for k, v := range a.Rewrite {
		total.Rewrite[k] = v
	}
}

func countAll(m map[string][]int) int {
	n := 0
	for _, v := range m {
		n += len(v)
	}
	return n
}

func sumAll(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func sumRewrites(m map[string]rwVersion) int {
	n := 0
	for _, v := range m {
		n += v.Ver
	}
	return n
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "")
}

// cptRequireAcked fails unless a holds at least one acknowledged counter
// increment, append and rewrite.
func cptRequireAcked(t *testing.T, what string, a acks) {
	t.Helper()
	assert.GreaterOrEqual(t, countAll(a.Counter), 1, "%s: no counter increment was acknowledged", what)
	assert.GreaterOrEqual(t, sumAll(a.Append), 1, "%s: no append was acknowledged", what)
	assert.GreaterOrEqual(t, len(a.Rewrite), 1, "%s: no rewrite was acknowledged", what)
}

// cptWaitAcked waits until the workload has acknowledged at least one
// commit of each kind. The deadline only guards against a hang (a daemon
// that commits nothing): it fails the test, with the workload's output.
func cptWaitAcked(t *testing.T, w *proc, out *loadOutput) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		a := out.snapshot()
		if countAll(a.Counter) > 0 && sumAll(a.Append) > 0 && len(a.Rewrite) > 0 {
			return
		}
		select {
		case <-w.exited:
			t.Fatalf("the workload ended before a commit of each kind was acknowledged; output:\n%s", out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no commit of each kind acknowledged after %v; workload output:\n%s", waitLimit, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
