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

// MaxPerUID bounds the pairs learned for one user (root included): a
// site has a handful of counters per user; beyond, nothing more is
// learned for that user, whoever else still learns.
const MaxPerUID = 64

// MaxLearned bounds the pairs of all users but root together, and with
// MaxPerUID the stored file: one user fills at most MaxPerUID of it, so
// no one user can fill it for the others, and root's pairs never
// count against it.
const MaxLearned = 512

// MaxPath and MaxCmd bound a pair: longer ones are not learned.
const (
	MaxPath = 4096
	MaxCmd  = 1024
)

// MaxBytes bounds the stored file: what Encode writes for a full set.
const MaxBytes = (MaxLearned + MaxPerUID) * maxLine

// maxLine bounds one stored line: a uid, a path (journal targets are
// bounded the same way) and a command, quoted, and the family word.
const maxLine = 4*(MaxPath+MaxCmd) + 30

// Pair is a file, by its path below the mount root, and a program (a
// name argv cannot choose: see the caller) that user UID was seen
// running when it read the file and then wrote it without a lock of its
// own. A pair selects only that user's processes. A family pair was
// learned from a request whose read and write were made by different
// processes of one tree (a shell's cat, its redirect, its mv): the
// program's children then open the file in its name.
type Pair struct {
	UID       uint32
	Path, Cmd string
}

// userPath is a path a user has pairs for.
type userPath struct {
	uid  uint32
	path string
}

// Learned is the set of pairs learned in auto mode.
type Learned struct {
	mu     sync.Mutex
	pairs  map[Pair]bool    // true: a family pair
	paths  map[userPath]int // how many pairs name each path, per user
	fam    map[userPath]int // how many family pairs name each path
	byUID  map[uint32]int   // pairs per user
	others int              // pairs of users other than root
}

// NewLearned returns an empty set.
func NewLearned() *Learned {
	return &Learned{pairs: map[Pair]bool{}, paths: map[userPath]int{}, fam: map[userPath]int{}, byUID: map[uint32]int{}}
}

// Add learns p; false if known already, too long, or past a bound.
func (l *Learned) Add(p Pair) bool { return l.add(p, false) }

// AddFamily learns p as a family pair (a known pair becomes one); false
// if it was one already, too long, or past a bound.
func (l *Learned) AddFamily(p Pair) bool { return l.add(p, true) }

func (l *Learned) add(p Pair, family bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	fam, known := l.pairs[p]
	if known {
		if !family || fam {
			return false
		}
		l.pairs[p] = true
		l.fam[userPath{p.UID, p.Path}]++
		return true
	}
	if l.fullLocked(p.UID) || len(p.Path) > MaxPath || len(p.Cmd) > MaxCmd {
		return false
	}
	l.pairs[p] = family
	if family {
		l.fam[userPath{p.UID, p.Path}]++
	}
	l.paths[userPath{p.UID, p.Path}]++
	l.byUID[p.UID]++
	if p.UID != 0 {
		l.others++
	}
	return true
}

// Full reports whether nothing more can be learned for user uid.
func (l *Learned) Full(uid uint32) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fullLocked(uid)
}

func (l *Learned) fullLocked(uid uint32) bool {
	return l.byUID[uid] >= MaxPerUID || uid != 0 && l.others >= MaxLearned
}

// HasPath reports whether any program was learned for path and user
// uid: only then is the opener's program worth reading.
func (l *Learned) HasPath(uid uint32, p string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.paths[userPath{uid, p}] > 0
}

// HasFamilyPath reports whether a family pair was learned for path and
// user uid: only then is an opener's parent worth reading.
func (l *Learned) HasFamilyPath(uid uint32, p string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fam[userPath{uid, p}] > 0
}

// Has reports whether p was learned.
func (l *Learned) Has(p Pair) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.pairs[p]
	return ok
}

// IsFamily reports whether p was learned as a family pair.
func (l *Learned) IsFamily(p Pair) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pairs[p]
}

// Len is the number of pairs learned.
func (l *Learned) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pairs)
}

// List returns the pairs, sorted by user, path and program.
func (l *Learned) List() []Pair {
	l.mu.Lock()
	out := make([]Pair, 0, len(l.pairs))
	for p := range l.pairs {
		out = append(out, p)
	}
	l.mu.Unlock()
	slices.SortFunc(out, func(a, b Pair) int {
		return cmp.Or(cmp.Compare(a.UID, b.UID), cmp.Compare(a.Path, b.Path), cmp.Compare(a.Cmd, b.Cmd))
	})
	return out
}

// Encode writes the pairs one a line: the uid, then the path and the
// program as Go-quoted strings, then "family" for a family pair.
func (l *Learned) Encode() []byte {
	var b bytes.Buffer
	for _, p := range l.List() {
		b.WriteString(strconv.FormatUint(uint64(p.UID), 10))
		b.WriteByte(' ')
		b.WriteString(strconv.Quote(p.Path))
		b.WriteByte(' ')
		b.WriteString(strconv.Quote(p.Cmd))
		if l.IsFamily(p) {
			b.WriteString(" " + familyWord)
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// ErrBadLearned: the stored set is not what Encode writes.
var ErrBadLearned = errors.New("rmw: bad learned file")

// Decode reads what Encode wrote, with the bounds Add keeps: pairs past
// a user's share, or past the whole set's, are dropped, whatever the
// file holds. A line that does not parse is an error (so is a file of
// the format before pairs carried their user): the caller then starts
// from an empty set.
func Decode(r io.Reader) (*Learned, error) {
	l := NewLearned()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	for sc.Scan() {
		p, family, err := parseLine(sc.Text())
		if err != nil {
			return NewLearned(), err
		}
		l.add(p, family)
	}
	if err := sc.Err(); err != nil {
		return NewLearned(), ErrBadLearned
	}
	return l, nil
}

// familyWord ends the stored line of a family pair.
const familyWord = "family"

func parseLine(s string) (Pair, bool, error) {
	bad := func() (Pair, bool, error) { return Pair{}, false, ErrBadLearned }
	us, rest, ok := strings.Cut(s, " ")
	if !ok {
		return bad()
	}
	uid, err := strconv.ParseUint(us, 10, 32)
	if err != nil {
		return bad()
	}
	qp, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return bad()
	}
	rest, ok = strings.CutPrefix(rest[len(qp):], " ")
	if !ok {
		return bad()
	}
	qc, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return bad()
	}
	family := false
	switch rest[len(qc):] {
	case "":
	case " " + familyWord:
		family = true
	default:
		return bad()
	}
	p, _ := strconv.Unquote(qp)
	c, _ := strconv.Unquote(qc)
	if p == "" || path.IsAbs(p) {
		return bad()
	}
	return Pair{UID: uint32(uid), Path: p, Cmd: c}, family, nil
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
