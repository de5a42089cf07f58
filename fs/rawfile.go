package fs

import (
	"errors"
	"os"
	"strings"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
	"github.com/safefs/safefs/internal/magic"
)

// Raw files (docs/sqlite.md). Some files keep their own consistency: a
// SQLite database with its rollback journal, its write-ahead log and
// the WAL's shared-memory index. SQLite writes pages in place, orders
// them with fsync, tells processes apart with fcntl locks at fixed
// bytes, and shares the index through MAP_SHARED maps of the -shm file.
// Staging breaks each of these: a page written by one connection stays
// pending while another reads the file, each commit is a new inode, and
// a map's size and pages are a version's, not the file's. So such a file
// is served raw: every open reads and writes its one backing inode in
// place (no staging, no versions, fsync forwarded), and the kernel is
// given that inode as the backing file of each open (passthrough), so
// that every process's reads, writes and maps share its page cache and
// its size; without passthrough, each open shares its kernel inode's
// page cache instead (not direct I/O).
//
// With cache=version those opens share one kernel inode, the raw node:
// that of the generation the file had when it became raw, or of a new
// one if it had been opened before (makeRaw). The kernel refuses an open
// without the backing file of an inode that has one, and applies OPEN
// replies in whatever order their callers wake: an open decided before
// the file was raw, arriving after a passed-through one on the same
// inode, would fail (and SQLite would take the database for read-only).
// So opens that were not raw never meet the raw node; an open of a raw
// file that reaches another node is sent to the raw node (ESTALE), and
// if it comes back there all the same it is direct I/O: its reads and
// writes reach the raw file through the daemon.
//
// A file is raw from the moment one of these is seen, for as long as
// the daemon knows the logical file:
//   - its name ends in -journal, -wal or -shm and the name without it is
//     a regular file in the same directory (rawName);
//   - it begins with the SQLite header (rawContent), looked at once per
//     committed version, at its first open;
//   - a writer takes an fcntl lock at SQLite's lock bytes on it while it
//     is empty or has the header (rawLock): a new database, whose creator
//     locks it before it writes the header.
//
// A commit never renames over a raw file: the handles serving it would
// be left on the replaced inode. A handle that holds pending bytes when
// its file becomes raw publishes them in place (commitWhole) at its
// commit point and is served raw from then on; a clean one is switched
// at once (switchRaw).

// rawFile is a file's raw state (under f.mu, but file.raw).
type rawFile struct {
	// plain: a committed version found not raw (rawNow): not looked at
	// again.
	plain key
	// gen: the raw node's generation (cache=version).
	gen uint64
	// pt: the file's backing inode, open for reading and writing and
	// registered as the backing file (ID ptID) of open handles; open
	// counts them.
	pt   *os.File
	ptID int32
	open int
	// cached: open handles reading through a node's page cache.
	cached int
}

// rawMode is how a raw node serves its opens, decided by its first.
type rawMode int

const (
	rawUndecided rawMode = iota
	rawPassthrough
	rawPageCache
)

func (f *file) isRaw() bool { return f.raw.Load() }

// rawName reports whether nm in dir is a database's sibling: a SQLite
// suffix after the name of a regular file there.
func rawName(dir int, nm string) bool {
	base, ok := magic.SQLiteSibling(nm)
	if !ok {
		return false
	}
	st, err := backing.StatAt(dir, base)
	return err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG
}

// rawSibling reports whether one of f's names is a database's sibling.
func (n *Node) rawSibling() bool {
	for _, o := range n.f.nameList() {
		raw := false
		_ = o.withDir(func(dir int) error { raw = rawName(dir, o.name); return nil })
		if raw {
			return true
		}
	}
	return false
}

// rawNow reports whether n's file is served raw, looking at its name
// and its committed version's first bytes if that version was not
// looked at yet. Called at each open, with its flags, before anything is
// opened. A truncating writer's open does not look at the content (it
// throws it away: not SQLite's way), and leaves the version to the next.
func (n *Node) rawNow(flags uint32) bool {
	f := n.f
	if f.kind != unix.S_IFREG {
		return false
	}
	if f.isRaw() {
		return true
	}
	k := n.r.ids.current(f)
	f.mu.Lock()
	seen := f.rw.plain == k
	f.mu.Unlock()
	if seen {
		return false
	}
	why := ""
	if n.rawSibling() {
		why = "name"
	} else if isWrite(flags) && flags&syscall.O_TRUNC != 0 {
		return false
	} else if c := n.rawContent(); c == contentSQLite {
		why = "header"
	}
	if why == "" {
		f.mu.Lock()
		f.rw.plain = k
		f.mu.Unlock()
		return false
	}
	n.makeRaw(why, false)
	return true
}

type content int

const (
	contentOther content = iota
	contentEmpty
	contentSQLite
)

// rawContent tells an empty committed version and a SQLite database
// from any other content (unknown: other). A smaller file than a
// database costs one stat, without an open.
func (n *Node) rawContent() content {
	st, err := n.statNamed()
	if err != nil {
		return contentOther
	}
	if st.Size == 0 {
		return contentEmpty
	}
	if st.Size < magic.SQLiteMinSize {
		return contentOther
	}
	f, err := n.openCurrent(unix.O_RDONLY | unix.O_NOATIME)
	if errors.Is(err, syscall.EPERM) {
		f, err = n.openCurrent(unix.O_RDONLY) // O_NOATIME needs the owner's rights
	}
	if err != nil {
		return contentOther
	}
	defer f.Close()
	if magic.SQLite(f) {
		return contentSQLite
	}
	return contentOther
}

// rawLock makes n's file raw when lk, an fcntl lock asked for through fh,
// is at SQLite's lock bytes, the asker has it open for writing, and the
// file is empty or a database. A reader's lock, or a lock on a file with
// other content, changes nothing: only someone who may write a file can
// make its writes in place, and only for what SQLite uses.
func (n *Node) rawLock(fh gofs.FileHandle, lk *fuse.FileLock) {
	f := n.f
	if f.kind != unix.S_IFREG || f.isRaw() || lk.Typ == unix.F_UNLCK || !n.sqliteLock(lk) {
		return
	}
	if h, ok := fh.(*handle); !ok || !h.write {
		return
	}
	if c := n.rawContent(); c == contentEmpty || c == contentSQLite {
		n.makeRaw("lock", false)
	}
}

// sqliteLock reports whether lk is at SQLite's lock bytes of a database,
// or of a -shm file.
func (n *Node) sqliteLock(lk *fuse.FileLock) bool {
	return magic.SQLiteLock(lk.Start, lk.End, func() bool {
		for _, o := range n.f.nameList() {
			if strings.HasSuffix(o.name, "-shm") {
				return true
			}
		}
		return false
	})
}

// makeRaw marks n's file raw and switches its clean handles. create:
// n was reached by a create, which the kernel does not run beside other
// opens of the name: n may be the raw node unless readers hold its pages
// or backing file.
func (n *Node) makeRaw(why string, create bool) {
	f := n.f
	f.mu.Lock()
	if f.isRaw() {
		f.mu.Unlock()
		return
	}
	f.raw.Store(true)
	f.pt.never = true // no reader's version is passed through (passthrough.go)
	if n.r.opts.VersionCache {
		if !create || n.rl.cached > 0 || n.rl.pt.id != 0 || n.handle(func(h *handle) bool { return h.mapped.Load() }) != nil {
			f.moveOn(n.r)
		}
		f.rw.gen = f.curGen() // moveOn keeps it from now on
	}
	old := f.takeReaderFds()
	f.mu.Unlock()
	releaseAll(old)
	n.r.count.rawFiles.Add(1)
	log := n.r.log.Info
	if why == "name" {
		log = n.r.log.Debug // a journal per transaction, in some modes
	}
	log("served raw: a file that keeps its own consistency (SQLite) is read and written in place",
		zap.String("path", logPath(n.path())), zap.String("seen_by", why))
	for _, h := range f.handleList() {
		h.mu.Lock()
		h.switchRaw()
		h.mu.Unlock()
	}
}

// switchRaw makes h, a handle of a file that became raw, read and write
// the file's one backing inode (h.mu held). A handle with pending bytes
// is switched after its commit, which writes them in place (commit).
// A writer whose kernel writes its staging file (ptwrite.go) is never
// switched: its writes keep coming there, and each close publishes them.
func (h *handle) switchRaw() {
	if h.raw || h.closed || h.private || h.ptWrite || !h.n.f.isRaw() {
		return
	}
	if h.p.dirty() || h.p.holds() {
		return
	}
	mode := h.baseFlags()
	if h.p.appends() {
		mode |= unix.O_APPEND
	}
	fd, err := h.n.openCurrent(mode)
	if err == nil {
		err = h.rawSetID(fd)
	}
	if err != nil {
		// Unlinked, or replaced directly in BACKING: it keeps the
		// inode it has, which no other open can reach.
		h.n.r.log.Debug("raw: a handle keeps its version", zap.String("path", logPath(h.n.path())), zap.Error(err))
		if fd != nil {
			fd.Close()
		}
		return
	}
	f := h.n.f
	f.mu.Lock() // quiet reads a reader's baseVer under it
	h.setBase(fd, f.version)
	f.mu.Unlock()
	h.raw = true
	h.mapped.Store(false) // its size is the file's now (kernelSize)
}
