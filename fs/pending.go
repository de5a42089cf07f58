package fs

import (
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
)

// pending is the version a writer builds before its commit: private to
// its handle, invisible to every other open until a commit publishes it
// whole. Its bytes are in a staging file (stage), or in memory (buf) for
// small appends and a new file's first content (appendbuf.go). The
// handle's mu guards it, except staged, which stats read without it.
type pending struct {
	stage   *os.File   // the staging file, nil if none
	stageNm string     // its name in staging/, "" if nameless
	buf     []byte     // bytes not in stage yet (appendbuf.go)
	mode    appendMode // where its bytes go, at a write and at commit
	// newFile: this handle's create made the file and its pending
	// version is buf, whole, with no staging file until something needs
	// one (appendbuf.go). made: the create was this handle's, and it has
	// not committed: without O_TRUNC, newFile starts at the first write
	// if no commit came since.
	newFile, made bool
	wroteAt       unix.Timespec // a new file's last buffered write: its mtime
	state         changeState   // what it holds that no commit has published
	// killed: the last FLUSH came from a process killed by a signal, so
	// RELEASE must not commit what it left; a live close or write clears
	// it. Not a state: a killed close of a truncOnly version leaves it
	// truncOnly for the next live close (deferTrunc).
	killed bool
	// staged: 1 + the size of the pending version of a writer that is
	// not appending, 0 if none (kernelSize).
	staged atomic.Int64
}

// appendMode is where a pending version's bytes go, at a write and at
// its commit.
type appendMode uint8

const (
	noAppend  appendMode = iota // where the writer says: the version is whole, a commit replaces the file
	appending                   // O_APPEND: the bytes are appends, placed at the end of the file at commit
	// atEnd: an O_APPEND descriptor whose pending version became whole
	// (unappend): its writes go to the end of that version, a commit
	// replaces the file; once nothing is pending it appends again.
	atEnd
)

// changeState is what a pending version holds that no commit has
// published; a change by the writer (handle.changed) makes it modified,
// a commit (or a rejection, or a discard) clean.
type changeState uint8

const (
	clean changeState = iota // nothing: the writer shows the committed version
	// truncOnly: only the open's O_TRUNC, nothing written yet. A shell's
	// `cmd > file` closes such a descriptor after moving it to stdout:
	// that close must not publish an empty file (deferTrunc).
	truncOnly
	modified // written, truncated or allocated since the last commit
)

// appends reports whether the pending bytes are appends (appending).
func (p *pending) appends() bool { return p.mode == appending }

// dirty reports whether there is anything to publish.
func (p *pending) dirty() bool { return p.state != clean }

// holds reports whether there are pending bytes: a staging file,
// buffered bytes, or a new file's content (even empty).
func (p *pending) holds() bool { return p.stage != nil || len(p.buf) > 0 || p.newFile }

// size is the size of the pending bytes (for an appender, its appends).
func (p *pending) size() (int64, error) {
	if p.stage == nil {
		return int64(len(p.buf)), nil
	}
	st, err := backing.Fstat(int(p.stage.Fd()))
	return st.Size, err
}

// taken forgets the staging file that a commit's rename, or rejected/,
// took: nothing is pending any more.
func (p *pending) taken() {
	p.stage, p.stageNm, p.state = nil, "", clean
	p.staged.Store(0)
}

// appendAgain: an O_APPEND descriptor whose whole pending version
// (unappend) was committed, or rejected, appends again: its next write
// goes to the end of the file then current, as on a plain file, and its
// lines are published again.
func (p *pending) appendAgain() {
	if p.mode == atEnd && p.stage == nil && len(p.buf) == 0 {
		p.mode = appending
	}
}

// discard drops the pending version, its staging file and its buffer.
func (p *pending) discard(r *root) {
	if p.stage != nil {
		r.dropTemp(r.stagingfd, p.stage, p.stageNm)
	}
	p.dropBuf(r)
	p.stage, p.stageNm, p.state, p.newFile, p.made = nil, "", clean, false, false
	p.staged.Store(0)
}

// dropBuf gives the buffered bytes back to the mount's bound.
func (p *pending) dropBuf(r *root) {
	r.appendBufs.give(len(p.buf))
	p.buf = nil
}
