// Package fs is the safefs FUSE file system: a backing directory served
// so that every write becomes atomic and serialized. Mount serves it;
// everything else in this package answers the kernel's requests.
//
// # Objects
//
//   - root (root.go) is one mount: the backing directory's descriptor,
//     the internal directory BACKING/.safefs (internaldir.go), the
//     tables below, the commit lock manager, the journal and the
//     script-lock book.
//   - file (file.go) is a logical file: what a path names across
//     commits. It keeps one inode number for its whole life, while each
//     commit gives it a new backing inode, its committed version
//     (file.key). ids (ids.go) maps backing inodes to logical files; a
//     file with open handles holds its version open (pin.go), so a
//     reused backing number is never taken for it.
//   - Node (node*.go) is a kernel inode of a logical file, go-fuse's
//     InodeEmbedder. With Options.VersionCache a file may have several,
//     each with a role: a reader node serves one version from the page
//     cache for its whole life, a direct node serves writers and readers
//     of other versions with direct I/O (roles*.go).
//   - handle (handle*.go) is one open file. A reader reads the version it
//     opened (base). A writer reads the latest committed version until
//     its first write, then works on a private pending version (h.p).
//   - pending (pending.go) is that version: a staging file (stage), or
//     bytes in memory for small appends and a new file's first content
//     (buf, appendbuf.go); where its bytes go (mode: appending or not)
//     and what no commit has published yet (state: clean, truncOnly,
//     modified). The handle's mu guards it.
//
// # Requests
//
// Lookups and directory operations are Node methods (node.go,
// node_dir.go); Open and Create are in node_open.go; Read and Lseek
// (handle_read.go), Write, ftruncate and fallocate (handle_write.go),
// Flush, Fsync and Release (handle_close.go) are handle methods. A
// commit (commit.go) runs in Flush (close), Fsync, at the release of a
// script lock (unlock.go), and in Release when nothing else committed.
// It takes the file's commit lock, checks under it that a name still
// leads to the committed version, and publishes the pending version as
// one of:
//
//   - replace: the staging file renamed over the name (one link,
//     commit_replace.go);
//   - append: the pending bytes written at the end of the file in place,
//     after a journal record, without copying the file
//     (commit_append.go);
//   - in place: a hard-linked or raw file rewritten after its old bytes
//     were saved to undo/ (the links stay one file, commit_inplace.go).
//
// A commit that cannot be made keeps its bytes in rejected/
// (commit_reject.go). Files that keep their own consistency (SQLite)
// are served raw, in place, without versions (rawfile*.go); what makes
// a file SQLite's (header, sibling names, lock bytes) is package
// magic's.
//
// Script locks (flock, fcntl, OFD) are decided in the daemon (locks*.go)
// by a scriptlock.Locker, keyed by the logical file, or by path across
// hosts. Releasing one publishes the releasing process's pending writes
// first; a grant moves a daemon-served reader to the latest version.
//
// Read-modify-write sessions (rmw.go) order an unlocked script's
// open..commit against another's: a thread's session, or a script
// process's whose children open in its name, moved by a rename over the
// file. The table is package rmw's; which opens take a session, what
// is learned and the learned-pairs file are internal/rmwstate's, fed
// plain values by rmw.go.
//
// Status, counters, gauges and Observer events (status.go, stats.go,
// observe.go) are internal/report's types, named here as fs's own; fs
// fills them, report renders them.
//
// Requests act on a descriptor checked to be the caller's file
// (self.go), never on a name. errno is made in one place (errno.go).
//
// # Below fs
//
// What needs no FUSE type lives in small packages under internal/, each
// with its own tests:
//
//   - backing: every system call on BACKING (*at calls on directory
//     descriptors with one validated name, openat2 beneath BACKING
//     without symlinks, lease-aware reopens, recovery targets); dirfds:
//     the bounded cache of directory descriptors; owndir: the checks
//     that the internal directory is the daemon's own; staging: staging
//     files, their copies and the pool made ahead; xattr and acl.
//   - proc: what /proc tells of a caller (a killed writer, a thread's
//     process, its parent, descendants, descriptors held, command
//     lines, leases);
//     exitwatch: sessions ended at their holder's exit.
//   - mountinfo, mountroot, fuseconn, mountwatch, fuseprocs: the mount
//     table, the swap of the mount's root, the FUSE connection seen from
//     outside, the unmount watcher, processors for go-fuse's readers.
//   - lockbook, redo, limits, loglimit, estale, epoch, recent, magic,
//     caps: the script-lock record, the redo queue, per-user bounds, log
//     rate limits and shortened paths, ESTALE retries, lookup epochs,
//     pairs seen locking, file headers and SQLite's names and lock
//     bytes, a thread's capabilities.
//   - rmwstate: a mount's session tables, selection and learning;
//     report: status, counters, gauges and events, and their rendering.
//
// docs/design.md explains each choice; docs/threat-model.md what it
// defends against.
package fs
