package rmw

import (
	"cmp"
	"slices"
	"sync"
)

// Request classes. Once a (file, program) pair is learned, its requests
// are told apart by features the caller reads from each process (a CGI
// request's method and the names of its query's parameters). A class
// is presumed to write, so its requests take sessions, until
// ReadOnlyAfter of its sessions have ended without a write of the file
// and none of its requests ever opened the file for writing: then it is
// judged read-only, and its read-only opens take no session (they read
// whole committed versions, and write nothing another could lose). A
// class whose request opens the file for writing is a writing class
// from then on. Classes are kept in memory only: after a remount each
// is judged again.

// ReadOnlyAfter is how many sessions of a class must end without a
// write before the class is judged read-only.
const ReadOnlyAfter = 3

// MaxClasses bounds the classes of one pair; requests of a class past
// it are not told apart (nil class: they take sessions).
const MaxClasses = 16

// MaxFeatures bounds a class's features.
const MaxFeatures = 256

// Classes holds the request classes of the learned pairs.
type Classes struct {
	mu       sync.Mutex
	m        map[classKey]*Class
	count    map[Pair]int
	onJudged func(*Class)
}

// OnJudged has f called, in a goroutine, with each class judged
// read-only (to log it). Call it before the set is used.
func (cs *Classes) OnJudged(f func(*Class)) { cs.onJudged = f }

type classKey struct {
	pair     Pair
	features string
}

// Class is the requests of one pair that share their features.
type Class struct {
	Pair     Pair
	Features string

	cs     *Classes
	wrote  bool
	reads  int           // sessions ended without a write
	judged chan struct{} // closed when judged read-only
}

// NewClasses returns an empty set.
func NewClasses() *Classes {
	return &Classes{m: map[classKey]*Class{}, count: map[Pair]int{}}
}

// Get returns the class of p's requests with these features, made on
// first use; nil past MaxClasses classes of p, or for features longer
// than MaxFeatures.
func (cs *Classes) Get(p Pair, features string) *Class {
	if len(features) > MaxFeatures {
		return nil
	}
	k := classKey{p, features}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if c := cs.m[k]; c != nil {
		return c
	}
	if cs.count[p] >= MaxClasses {
		return nil
	}
	c := &Class{Pair: p, Features: features, cs: cs, judged: make(chan struct{})}
	cs.m[k] = c
	cs.count[p]++
	return c
}

// ReadOnly reports whether the class is judged read-only.
func (c *Class) ReadOnly() bool {
	c.cs.mu.Lock()
	defer c.cs.mu.Unlock()
	return c.readOnlyLocked()
}

func (c *Class) readOnlyLocked() bool { return !c.wrote && c.reads >= ReadOnlyAfter }

// Judged is closed when the class is judged read-only; nil (never
// closed) once the class is seen writing.
func (c *Class) Judged() <-chan struct{} {
	c.cs.mu.Lock()
	defer c.cs.mu.Unlock()
	if c.wrote {
		return nil
	}
	return c.judged
}

// Wrote records that a request of the class opened the file for
// writing; it reports whether the class was judged read-only until then.
func (c *Class) Wrote() (wasReadOnly bool) {
	c.cs.mu.Lock()
	defer c.cs.mu.Unlock()
	wasReadOnly = c.readOnlyLocked()
	c.wrote = true
	return wasReadOnly
}

// endedReading records a session of the class that ended without a
// write; it reports whether that judged the class read-only.
func (c *Class) endedReading() bool {
	c.cs.mu.Lock()
	defer c.cs.mu.Unlock()
	if c.wrote || c.reads >= ReadOnlyAfter {
		return false
	}
	c.reads++
	if c.reads == ReadOnlyAfter {
		close(c.judged)
		if f := c.cs.onJudged; f != nil {
			go f(c)
		}
		return true
	}
	return false
}

// ClassInfo is one class as List sees it.
type ClassInfo struct {
	Pair     Pair
	Features string
	Wrote    bool // a writing class
	Reads    int  // sessions ended without a write (up to ReadOnlyAfter)
	ReadOnly bool
}

// List returns the classes, sorted by user, path, program and features.
func (cs *Classes) List() []ClassInfo {
	cs.mu.Lock()
	out := make([]ClassInfo, 0, len(cs.m))
	for _, c := range cs.m {
		out = append(out, ClassInfo{Pair: c.Pair, Features: c.Features, Wrote: c.wrote, Reads: c.reads, ReadOnly: c.readOnlyLocked()})
	}
	cs.mu.Unlock()
	slices.SortFunc(out, func(a, b ClassInfo) int {
		return cmp.Or(cmp.Compare(a.Pair.UID, b.Pair.UID), cmp.Compare(a.Pair.Path, b.Pair.Path),
			cmp.Compare(a.Pair.Cmd, b.Pair.Cmd), cmp.Compare(a.Features, b.Features))
	})
	return out
}
