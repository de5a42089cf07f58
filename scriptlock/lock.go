// Package scriptlock holds the flock and fcntl locks that scripts take
// through safefs when the kernel cannot (several hosts share one backing
// directory): the lock table logic, pure, and a table kept in etcd.
package scriptlock

import (
	"context"
	"errors"
	"sort"

	"golang.org/x/sys/unix"
)

// MaxEnd is the end the kernel gives a lock "to the end of the file"
// (OFFSET_MAX).
const MaxEnd = 1<<63 - 1

// Lock types, as fcntl's.
const (
	Read   = unix.F_RDLCK
	Write  = unix.F_WRLCK
	Unlock = unix.F_UNLCK
)

var (
	// ErrConflict: another owner holds a conflicting lock (EAGAIN).
	ErrConflict = errors.New("conflicting lock held")
	// ErrUnavailable: the table could not be read or written in time
	// (ENOLCK); nothing is decided locally instead.
	ErrUnavailable = errors.New("lock table unavailable")
)

// Range is a byte range [Start, End] (End inclusive) with a lock type.
type Range struct {
	Start, End uint64
	Type       uint32
}

func (r Range) overlaps(o Range) bool { return r.Start <= o.End && o.Start <= r.End }

// Conflicts reports whether two owners' ranges exclude each other: they
// overlap and one of them is a write lock.
func (r Range) Conflicts(o Range) bool {
	return r.overlaps(o) && (r.Type == Write || o.Type == Write)
}

// Request is a lock request of one owner on one file.
type Request struct {
	Key   string // the logical file: its path below the mount root
	Owner uint64 // the kernel's lock owner (process files, or open file for flock)
	Flock bool   // flock(2): whole-file locks, a namespace apart from fcntl's
	Pid   uint32 // the caller's process, reported to GETLK
	Range
}

// Held is a lock some owner holds, as GETLK reports it.
type Held struct {
	Pid uint32 // 0 when held through another node: its pid means nothing here
	Range
}

// Locker is what safefs asks for lock requests (fs.Options.ScriptLocks).
type Locker interface {
	// Get returns a lock that conflicts with r, if any.
	Get(ctx context.Context, r Request) (Held, bool, error)
	// Set applies r (Unlock releases); with wait it waits until no
	// conflicting lock is held or ctx ends (ctx.Err()), else it fails with
	// ErrConflict. held says whether r's owner still holds a range of
	// r.Key afterwards.
	Set(ctx context.Context, r Request, wait bool) (held bool, err error)
}

// Apply returns an owner's ranges after request req: the part of own
// that req covers is replaced by req (removed for Unlock), ranges are
// split at req's ends, and adjacent or overlapping ranges of one type
// are merged. The result is sorted by Start.
func Apply(own []Range, req Range) []Range {
	var out []Range
	for _, r := range own {
		if !r.overlaps(req) {
			out = append(out, r)
			continue
		}
		if r.Start < req.Start {
			out = append(out, Range{r.Start, req.Start - 1, r.Type})
		}
		if r.End > req.End {
			out = append(out, Range{req.End + 1, r.End, r.Type})
		}
	}
	if req.Type != Unlock {
		out = append(out, req)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return merge(out)
}

// merge joins touching ranges of one type; rs is sorted and has no
// overlaps of different types.
func merge(rs []Range) []Range {
	var out []Range
	for _, r := range rs {
		if n := len(out); n > 0 && out[n-1].Type == r.Type && r.Start <= out[n-1].End+1 {
			out[n-1].End = max(out[n-1].End, r.End)
			continue
		}
		out = append(out, r)
	}
	return out
}

// FirstConflict returns the first of others' ranges that conflicts with
// req.
func FirstConflict(others []Range, req Range) (Range, bool) {
	for _, o := range others {
		if o.Conflicts(req) {
			return o, true
		}
	}
	return Range{}, false
}
