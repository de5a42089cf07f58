// Package exitwatch ends read-modify-write sessions when their holder
// threads exit (docs/sessions.md): a holder killed with SIGKILL
// releases at once, and a reused thread id cannot keep a session. One
// epoll of pidfds serves every session of a mount.
package exitwatch

import (
	"slices"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/proc"
)

// Session is what a watch ends (an *rmw.Session).
type Session interface {
	End()        // ends the session (again: nothing)
	Ended() bool // reports whether it has ended
}

// Watch ends sessions when their holder threads exit, through one
// epoll of pidfds (a pidfd is readable once its thread, with
// PIDFD_THREAD, or its process has exited; an id could be reused).
type Watch struct {
	ep, wake int
	mu       sync.Mutex
	procs    map[int32]*watched
	byFd     map[int32]*watched
	stopped  bool
	done     chan struct{}
}

type watched struct {
	pid int32
	fd  int
	ss  []Session
}

// New starts a watch; Stop ends it.
func New() (*Watch, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(ep)
		return nil, err
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wake)}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, wake, &ev); err != nil {
		unix.Close(ep)
		unix.Close(wake)
		return nil, err
	}
	w := &Watch{ep: ep, wake: wake, procs: map[int32]*watched{}, byFd: map[int32]*watched{}, done: make(chan struct{})}
	go w.loop()
	return w, nil
}

// Add ends s when thread pid exits (before Linux 6.9, which has no
// PIDFD_THREAD: when its process exits); at once if it is gone already.
func (w *Watch) Add(pid int32, s Session) {
	w.mu.Lock()
	if p := w.procs[pid]; p != nil {
		// A long-lived holder takes many sessions: forget ended ones.
		p.ss = slices.DeleteFunc(p.ss, Session.Ended)
		p.ss = append(p.ss, s)
		w.mu.Unlock()
		return
	}
	if w.stopped {
		w.mu.Unlock()
		return
	}
	fd, err := unix.PidfdOpen(int(pid), unix.PIDFD_THREAD)
	if err == unix.EINVAL {
		if tgid := proc.Tgid(uint32(pid)); tgid != 0 {
			fd, err = unix.PidfdOpen(int(tgid), 0)
		}
	}
	if err == nil {
		unix.CloseOnExec(fd)
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
		if err = unix.EpollCtl(w.ep, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		w.mu.Unlock()
		s.End() // gone already (ESRCH)
		return
	}
	p := &watched{pid: pid, fd: fd, ss: []Session{s}}
	w.procs[pid], w.byFd[int32(fd)] = p, p
	w.mu.Unlock()
}

func (w *Watch) loop() {
	defer close(w.done)
	evs := make([]unix.EpollEvent, 32)
	for {
		n, err := unix.EpollWait(w.ep, evs, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return
		}
		for _, ev := range evs[:n] {
			if ev.Fd == int32(w.wake) {
				return
			}
			w.exited(ev.Fd)
		}
	}
}

func (w *Watch) exited(fd int32) {
	w.mu.Lock()
	p := w.byFd[fd]
	if p != nil {
		delete(w.byFd, fd)
		delete(w.procs, p.pid)
		_ = unix.EpollCtl(w.ep, unix.EPOLL_CTL_DEL, p.fd, nil)
		unix.Close(p.fd)
	}
	w.mu.Unlock()
	if p != nil {
		for _, s := range p.ss {
			s.End()
		}
	}
}

// Stop ends the watch loop and closes every pidfd (at unmount).
func (w *Watch) Stop() {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	w.stopped = true
	w.mu.Unlock()
	var one [8]byte
	one[0] = 1
	_, _ = unix.Write(w.wake, one[:])
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.procs {
		unix.Close(p.fd)
	}
	w.procs, w.byFd = nil, nil
	unix.Close(w.ep)
	unix.Close(w.wake)
}
