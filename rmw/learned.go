package rmw

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"io"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// MaxLearned bounds the pairs learned (and the file they persist in):
// a site has a handful of counters; beyond, nothing more is learned.
const MaxLearned = 512

// MaxPath and MaxCmd bound a pair: longer ones are not learned.
const (
	MaxPath = 4096
	MaxCmd  = 1024
)

// MaxBytes bounds the stored file: what Encode writes for a full set.
const MaxBytes = MaxLearned * maxLine

// maxLine bounds one stored line: a path (journal targets are bounded
// the same way) and a command, quoted.
const maxLine = 4*(MaxPath+MaxCmd) + 8

// Pair is a file, by its path below the mount root, and the program
// seen reading it and then writing it without a lock of its own.
type Pair struct {
	Path, Cmd string
}

// Learned is the set of pairs learned in auto mode.
type Learned struct {
	mu    sync.Mutex
	pairs map[Pair]bool
	paths map[string]int // how many pairs name each path
}

// NewLearned returns an empty set.
func NewLearned() *Learned {
	return &Learned{pairs: map[Pair]bool{}, paths: map[string]int{}}
}

// Add learns p; false if known already or the set is full.
func (l *Learned) Add(p Pair) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pairs[p] || len(l.pairs) >= MaxLearned || len(p.Path) > MaxPath || len(p.Cmd) > MaxCmd {
		return false
	}
	l.pairs[p] = true
	l.paths[p.Path]++
	return true
}

// Full reports whether nothing more can be learned.
func (l *Learned) Full() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pairs) >= MaxLearned
}

// HasPath reports whether any program was learned for path: only then
// is the opener's command line worth reading.
func (l *Learned) HasPath(p string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.paths[p] > 0
}

// Has reports whether p was learned.
func (l *Learned) Has(p Pair) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pairs[p]
}

// List returns the pairs, sorted.
func (l *Learned) List() []Pair {
	l.mu.Lock()
	out := make([]Pair, 0, len(l.pairs))
	for p := range l.pairs {
		out = append(out, p)
	}
	l.mu.Unlock()
	slices.SortFunc(out, func(a, b Pair) int { return cmp.Or(cmp.Compare(a.Path, b.Path), cmp.Compare(a.Cmd, b.Cmd)) })
	return out
}

// Encode writes the pairs one a line: two Go-quoted strings.
func (l *Learned) Encode() []byte {
	var b bytes.Buffer
	for _, p := range l.List() {
		b.WriteString(strconv.Quote(p.Path))
		b.WriteByte(' ')
		b.WriteString(strconv.Quote(p.Cmd))
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// ErrBadLearned: the stored set is not what Encode writes.
var ErrBadLearned = errors.New("rmw: bad learned file")

// Decode reads what Encode wrote, at most MaxLearned pairs; the rest
// of a longer file is ignored. A line that does not parse is an error:
// the caller then starts from an empty set.
func Decode(r io.Reader) (*Learned, error) {
	l := NewLearned()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	for sc.Scan() && !l.Full() {
		p, err := parseLine(sc.Text())
		if err != nil {
			return NewLearned(), err
		}
		l.Add(p)
	}
	if err := sc.Err(); err != nil {
		return NewLearned(), ErrBadLearned
	}
	return l, nil
}

func parseLine(s string) (Pair, error) {
	qp, err := strconv.QuotedPrefix(s)
	if err != nil {
		return Pair{}, ErrBadLearned
	}
	rest, ok := strings.CutPrefix(s[len(qp):], " ")
	if !ok {
		return Pair{}, ErrBadLearned
	}
	qc, err := strconv.QuotedPrefix(rest)
	if err != nil || len(qc) != len(rest) {
		return Pair{}, ErrBadLearned
	}
	p, _ := strconv.Unquote(qp)
	c, _ := strconv.Unquote(qc)
	if p == "" || path.IsAbs(p) {
		return Pair{}, ErrBadLearned
	}
	return Pair{Path: p, Cmd: c}, nil
}

// Globs selects paths (relative to the mount root): a glob with a '/'
// matches the whole path, one without matches the name in any directory.
type Globs []string

// Valid reports whether every glob is well formed.
func (g Globs) Valid() error {
	for _, x := range g {
		if x == "" {
			return errors.New("empty glob")
		}
		if _, err := path.Match(x, ""); err != nil {
			return errors.New("bad glob " + strconv.Quote(x))
		}
	}
	return nil
}

// Match reports whether p is selected.
func (g Globs) Match(p string) bool {
	for _, x := range g {
		target := p
		if !strings.Contains(x, "/") {
			target = path.Base(p)
		}
		if ok, _ := path.Match(x, target); ok {
			return true
		}
	}
	return false
}
