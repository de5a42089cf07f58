package fs

import (
	"bytes"
	"errors"
	"os"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
	"github.com/safefs/safefs/internal/staging"
)

// Long-lived appenders (docs/appenders.md). A FastCGI script or a daemon
// keeps its log open for append for its whole life: its bytes would stay
// pending until it exits, invisible to every other process, and be lost
// if it is killed. So the complete lines an O_APPEND descriptor writes
// are published at most Options.AppendPublish after they are written,
// and when its process is killed by a signal: each publish is an append
// commit like a close's (at the end of the file, under its lock, with
// its journal record). A partial last line stays pending until its
// newline comes, or an explicit commit point (close, fsync, unlock), or
// the bound below. The unit is the line, not the write(2): a writer with
// stdio buffering writes 4 or 8 KiB at a time, cutting lines anywhere,
// and a script printing field by field writes a line in several pieces;
// a reader never sees a line cut, nor another appender's record inside
// one.
//
// Each handle has one timer, armed by the first write after a publish
// and not again until the next write: an idle appender costs no CPU and
// no goroutine (time.AfterFunc runs one only when it fires).

const (
	// appendPendMax bounds an appender's pending bytes whatever the
	// delay: the write that brings them to it publishes at once, up to
	// the last line's end if one is in their last half, else all of them
	// (data without newlines is then published write by write).
	appendPendMax = 8 << 20
	// appendAtomicMax: an append up to this size is written to the file
	// under f.inPlace, so that a reader through the mount sees all of it
	// or none: a publish of lines never shows a line cut.
	appendAtomicMax = 2 * appendPendMax
)

// appendPub is a handle's publishing state, under h.mu.
type appendPub struct {
	timer *time.Timer
	armed bool // the timer is set and its publish has not begun
	// noNL: the first noNL bytes of noNLOf (a staging file) hold no
	// newline, so a look for one need not read them again.
	noNLOf *os.File
	noNL   int64
	// soft: the commit in progress is a publish, which a busy lock
	// does not fail (errPublishLater); later: the last one met it.
	soft, later bool
}

// errPublishLater: a publish could not take the file's lock (lock
// timeout, full wait queue, a cluster's lock service down): its bytes
// stay pending, and the timer tries again. A close, fsync or unlock
// commits them, or fails and keeps them in rejected/, as ever.
var errPublishLater = errors.New("file's lock not taken: publish tried again later")

// publishes reports whether h's pending bytes are appends that are
// published by lines (h.mu held). Not after an ftruncate or fallocate
// made its pending version whole (atEnd): that is a rewrite, committed
// at close, fsync or unlock only.
func (h *handle) publishes() bool {
	return h.p.appends() && !h.private && h.n.r.opts.AppendPublish > 0
}

// wroteAppend follows a write that left size bytes pending to an appender
// (h.mu held): it publishes them at once at the bound, else arms the
// timer.
func (h *handle) wroteAppend(size int64) {
	if !h.publishes() {
		return
	}
	if _, named := h.n.f.anyName(); size >= appendPendMax && named && !h.pub.later {
		// (An unlinked file keeps its appends pending, as its data;
		// after a busy lock, the timer tries again, not each write.)
		h.softPublish(appendPendMax / 2)
	}
	h.armPublish()
}

// armPublish sets the timer unless it is set or nothing is pending.
func (h *handle) armPublish() {
	if h.pub.armed || !h.p.dirty() {
		return
	}
	h.pub.armed = true
	d := h.n.r.opts.AppendPublish
	if h.pub.timer == nil {
		h.pub.timer = time.AfterFunc(d, h.publishDue)
		return
	}
	h.pub.timer.Reset(d)
}

// stopPublish stops the timer at the handle's release.
func (h *handle) stopPublish() {
	if h.pub.timer != nil {
		h.pub.timer.Stop()
	}
}

// publishDue is the timer's: it publishes the complete lines written
// since it was armed. Not those a killed process left to the processes
// sharing its descriptor: its close published its complete lines, and
// the rest waits for a live close.
func (h *handle) publishDue() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pub.armed = false
	if h.closed || h.p.killed || !h.p.dirty() || !h.publishes() {
		return
	}
	h.softPublish(0)
	if h.pub.later {
		h.armPublish()
	}
}

// softPublish is publishLines for the timer and the bound: a lock not
// taken leaves the bytes pending (later), any other failure is kept
// for the next close.
func (h *handle) softPublish(look int64) {
	h.pub.soft = true
	err := h.publishLines(look)
	h.pub.soft = false
	h.pub.later = errors.Is(err, errPublishLater)
	if !h.pub.later {
		h.keepErr(err)
	}
}

// keepErr keeps a failed publish's error for the descriptor's next
// close, as a failed commit at an unlock does: the failure itself was
// logged, and the bytes kept in rejected/, by reject.
func (h *handle) keepErr(err error) {
	if err != nil && h.unlockErr == nil {
		h.unlockErr = err
	}
}

// publishLines commits h's pending appends up to the end of their last
// complete line and keeps the partial last line pending (h.mu held).
// look > 0: a line's end is looked for in the last look bytes only, and
// without one there everything is committed.
func (h *handle) publishLines(look int64) error {
	n, err := h.linesEnd(look)
	if err != nil || n == 0 {
		return err
	}
	tail, err := h.cutPending(n)
	if err != nil {
		return err
	}
	err = h.commit()
	if tail.empty() {
		if err == nil {
			h.settle()
		}
		return err
	}
	if perr := h.putBack(tail); perr != nil {
		h.n.r.log.Error("an appender's partial last line could not be kept pending: lost",
			zap.String("path", logPath(h.n.path())), zap.Uint32("uid", h.uid), zap.Error(perr))
		if err == nil {
			err = perr
		}
	}
	return err
}

// linesEnd returns how many of h's pending bytes end with their last
// complete line, 0 if none does (publishLines for look).
func (h *handle) linesEnd(look int64) (int64, error) {
	if h.p.stage == nil { // at most appendBufMax, under look
		return int64(bytes.LastIndexByte(h.p.buf, '\n') + 1), nil
	}
	size, err := h.p.size()
	if err != nil {
		return 0, err
	}
	from := int64(0)
	if h.pub.noNLOf == h.p.stage {
		from = min(h.pub.noNL, size)
	}
	if look > 0 {
		from = max(from, size-look)
	}
	at, err := staging.LastNewline(h.p.stage, from, size)
	switch {
	case err != nil:
		return 0, err
	case at >= 0:
		return at + 1, nil
	case look > 0:
		return size, nil
	}
	h.pub.noNLOf, h.pub.noNL = h.p.stage, size
	return 0, nil
}

// pendingTail is what follows an appender's last complete line while
// the lines before it are committed: in memory when small (and not in a
// cluster, where pending appends are always named staging files), else
// in a staging file of its own.
type pendingTail struct {
	buf []byte
	f   *os.File
	nm  string
}

func (t pendingTail) empty() bool { return t.f == nil && len(t.buf) == 0 }

// cutPending leaves h's first n pending bytes pending and returns the
// rest. The staging file is cut before the commit, so that what its
// journal record describes (and, in a cluster, what its staging file
// holds: journal settleAppend) is exactly what it publishes.
func (h *handle) cutPending(n int64) (pendingTail, error) {
	var t pendingTail
	r := h.n.r
	if h.p.stage == nil {
		if int(n) < len(h.p.buf) {
			t.buf = bytes.Clone(h.p.buf[n:])
			r.appendBufs.give(len(h.p.buf) - int(n))
			h.p.buf = h.p.buf[:n]
		}
		return t, nil
	}
	size, err := h.p.size()
	if err != nil || size == n {
		return t, err
	}
	rest := size - n
	if rest <= appendBufMax && !r.clustered() {
		t.buf = make([]byte, rest)
		if _, err := h.p.stage.ReadAt(t.buf, n); err != nil {
			return pendingTail{}, err
		}
	} else {
		take := r.pool.TakeNameless
		if r.clustered() {
			take = r.pool.Take // its recovery reads it by name
		}
		f, nm, err := take()
		if err != nil {
			return pendingTail{}, err
		}
		if err := staging.CopyRange(f, 0, h.p.stage, n, rest); err != nil {
			r.dropTemp(r.stagingfd, f, nm)
			return pendingTail{}, err
		}
		t.f, t.nm = f, nm
	}
	if err := unix.Ftruncate(int(h.p.stage.Fd()), n); err != nil {
		if t.f != nil {
			r.dropTemp(r.stagingfd, t.f, t.nm)
		}
		return pendingTail{}, err
	}
	return t, nil
}

// putBack makes t pending again, after what the commit left pending:
// nothing, unless it was not made (a killed closer, an unlinked file).
func (h *handle) putBack(t pendingTail) error {
	r := h.n.r
	switch {
	case t.f != nil && h.p.stage == nil && len(h.p.buf) == 0:
		h.p.stage, h.p.stageNm = t.f, t.nm
	case t.f != nil:
		err := h.copyUp(true) // spills the buffer, if any, first
		if err == nil {
			err = staging.AppendTo(h.p.stage, t.f)
		}
		r.dropTemp(r.stagingfd, t.f, t.nm)
		if err != nil {
			return err
		}
	case !h.bufferWrite(t.buf, 0):
		if err := h.copyUp(true); err != nil {
			return err
		}
		st, err := backing.Fstat(int(h.p.stage.Fd()))
		if err != nil {
			return err
		}
		if _, err := unix.Pwrite(int(h.p.stage.Fd()), t.buf, st.Size); err != nil {
			return err
		}
	}
	h.p.state = modified
	h.settled.Store(0)
	return nil
}

// publishLater logs, within the rejections' bounds, a publish that met
// a busy lock.
func (h *handle) publishLater(why error) error {
	r := h.n.r
	if ok, skipped := r.rejectLog.Allow(); ok {
		r.log.Warn("appended lines not published yet: the file's lock was not taken; tried again",
			zap.String("path", logPath(h.n.path())), zap.Error(lockErrno(why)), zap.Uint32("uid", h.uid),
			zap.Int("not_logged_before", skipped))
	}
	return errPublishLater
}
