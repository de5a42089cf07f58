package fs

import "slices"

// nameSet is a file's names. Most files have one, so it is a slice: a
// map of one entry costs about 250 bytes for each file the kernel
// remembers (the bench's memory row), a slice of one 24.
type nameSet []name

func (s nameSet) has(n name) bool { return slices.Contains(s, n) }

// add reports whether n was not in s.
func (s *nameSet) add(n name) bool {
	if s.has(n) {
		return false
	}
	*s = append(*s, n)
	return true
}

func (s *nameSet) drop(n name) { s.dropIf(func(o name) bool { return o == n }) }

// dropIf drops the names gone reports.
func (s *nameSet) dropIf(gone func(name) bool) {
	*s = slices.DeleteFunc(*s, gone)
	if len(*s) == 0 {
		*s = nil // a file renamed often keeps no array
	}
}
