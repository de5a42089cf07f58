// Package mountinfo reads the kernel's mount tables
// (/proc/<pid>/mountinfo, proc(5)): one parser and one unescape for
// every part of safefs that looks for a mount (the daemon finding its
// own mount, the command line's checks before mounting, the tests).
package mountinfo

import (
	"os"
	"strconv"
	"strings"
)

// Self is this process's mount table.
const Self = "/proc/self/mountinfo"

// Mount is one line of a mountinfo table:
//
//	ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPER
//
// Root, Point and Source are unescaped.
type Mount struct {
	ID     int
	Dev    string // MAJ:MIN, as the table shows it ("0:52")
	Root   string // the mount's root within its file system
	Point  string // the mount point
	Type   string // the file system type ("fuse.safefs")
	Source string // the mount's source (safefs: BACKING)
}

// Parse reads a mountinfo table. Lines without the fields above (or
// whose ID is not a number) are left out.
func Parse(b []byte) []Mount {
	var out []Mount
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 2 {
			continue
		}
		id, err := strconv.Atoi(f[0])
		if err != nil {
			continue
		}
		out = append(out, Mount{ID: id, Dev: f[2], Root: Unescape(f[3]), Point: Unescape(f[4]),
			Type: g[0], Source: Unescape(g[1])})
	}
	return out
}

// Read reads and parses the mount table at path (Self, or another
// process's /proc/<pid>/mountinfo).
func Read(path string) ([]Mount, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(b), nil
}

// Find finds the mount of type fstype at mountpoint in this process's
// table, the last one mounted there (it is on top): its ID and its
// source.
func Find(mountpoint, fstype string) (id int, source string, found bool) {
	ms, err := Read(Self)
	if err != nil {
		return 0, "", false
	}
	for _, m := range ms {
		if m.Type == fstype && m.Point == mountpoint {
			id, source, found = m.ID, m.Source, true
		}
	}
	return id, source, found
}

// Unescape undoes the kernel's octal escapes in a mount table field
// (\040 for a space, \011, \012, \134); a cut or non-octal escape is
// kept as it is.
func Unescape(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var out []byte
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				out = append(out, byte(n))
				i += 3
				continue
			}
		}
		out = append(out, s[i])
	}
	return string(out)
}

// Elsewhere reports whether a mount namespace other than this process's
// has a mount of device dev (MAJ:MIN): it reads the mount table of one
// process of each other namespace.
func Elsewhere(dev string) bool {
	self, _ := os.Readlink("/proc/self/ns/mnt")
	seen := map[string]bool{self: true}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		ns, err := os.Readlink("/proc/" + e.Name() + "/ns/mnt")
		if err != nil || seen[ns] {
			continue
		}
		seen[ns] = true
		if ms, err := Read("/proc/" + e.Name() + "/mountinfo"); err == nil && hasDev(ms, dev) {
			return true
		}
	}
	return false
}

func hasDev(ms []Mount, dev string) bool {
	for _, m := range ms {
		if m.Dev == dev {
			return true
		}
	}
	return false
}
