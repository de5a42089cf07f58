package staging

import (
	"errors"
	"os"
	"sync"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Pool keeps a few nameless staging files (O_TMPFILE) made ahead
// by a goroutine, so that a writer's open does not wait for the file
// system to create one: that create was a third of the daemon's CPU time
// in a loop of 4 KiB rewrites (docs/benchmarks.md). A file taken gets its
// name with linkat; one never taken vanishes at close or at a crash,
// leaving nothing to sweep.
type Pool struct {
	dir  int // staging/, O_PATH
	size int
	log  *zap.Logger

	mu     sync.Mutex
	fds    []int
	off    bool // O_TMPFILE or linkat refused here: create by name
	closed bool
	wake   chan struct{}
	stop   chan struct{}
	done   chan struct{}
}

// NewPool starts the filler; size 0 is no pool.
func NewPool(dir, size int, log *zap.Logger) *Pool {
	p := &Pool{dir: dir, size: size, log: log, off: size <= 0,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if p.off {
		close(p.done)
		return p
	}
	go p.fill()
	p.poke()
	return p
}

// Take returns an empty private 0600 file in staging/ and its name.
func (p *Pool) Take() (*os.File, string, error) {
	fd, ok := p.pop()
	if !ok {
		return NewTemp(p.dir)
	}
	nm := TempName()
	err := unix.Linkat(fd, "", p.dir, nm, unix.AT_EMPTY_PATH)
	if err != nil {
		unix.Close(fd)
		if !refused(err) {
			return nil, "", err // EIO, ENOSPC...: as a create would fail
		}
		p.disable(err)
		return NewTemp(p.dir)
	}
	return os.NewFile(uintptr(fd), nm), nm, nil
}

// TakeNameless returns an empty private file in staging/ without a name
// (nm ""), for a pending append: it is never renamed into place (its
// bytes are copied to the end of the file) and recovery checks them in
// the file itself, so its name would only cost a linkat and an unlink.
// Without a pool it is named as Take does.
func (p *Pool) TakeNameless() (*os.File, string, error) {
	fd, ok := p.pop()
	if !ok {
		return NewTemp(p.dir)
	}
	return os.NewFile(uintptr(fd), "pending append"), "", nil
}

// pop takes a file made ahead, if the pool has one, and wakes the
// filler to replace it.
func (p *Pool) pop() (int, bool) {
	defer p.poke()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.off || len(p.fds) == 0 {
		return -1, false
	}
	fd := p.fds[len(p.fds)-1]
	p.fds = p.fds[:len(p.fds)-1]
	return fd, true
}

// refused: this file system or this daemon (linkat of an fd needs
// CAP_DAC_READ_SEARCH) cannot do it at all. EXDEV: a FUSE file system
// as BACKING (go-fuse's loopback) makes the O_TMPFILE but will not link
// it.
func refused(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.ENOENT) ||
		errors.Is(err, unix.EPERM) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EXDEV)
}

func (p *Pool) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *Pool) fill() {
	defer close(p.done)
	for {
		select {
		case <-p.stop:
			return
		case <-p.wake:
		}
		for p.short() {
			fd, err := unix.Openat(p.dir, ".", unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
			if err != nil {
				if refused(err) {
					p.disable(err)
				}
				break // a full disk: the next take creates, and fails, by name
			}
			if !p.put(fd) {
				return
			}
		}
	}
}

func (p *Pool) short() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.off && !p.closed && len(p.fds) < p.size
}

func (p *Pool) put(fd int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		unix.Close(fd)
		return false
	}
	p.fds = append(p.fds, fd)
	return true
}

func (p *Pool) disable(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.off {
		p.off = true
		p.log.Info("staging pool off: staging files are created by name", zap.Error(err))
	}
}

// Close stops the filler and drops the files not taken.
func (p *Pool) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	for _, fd := range p.fds {
		unix.Close(fd)
	}
	p.fds = nil
	p.mu.Unlock()
	close(p.stop)
	<-p.done
}
