package lockmgr

import (
	"context"
	"time"
)

// wait is the single deadline shared by all keys of one Lock call. Its
// context (and timer) is made only when the call first has to block, so
// uncontended Locks start no timer.
type wait struct {
	parent   context.Context
	deadline time.Time // zero: no Timeout, wait only for parent
	ctx      context.Context
	cancel   context.CancelFunc
}

func (m *Manager) newWait(ctx context.Context) *wait {
	w := &wait{parent: ctx}
	if m.opts.Timeout > 0 {
		w.deadline = time.Now().Add(m.opts.Timeout)
	}
	return w
}

// done returns a channel closed when the call must stop waiting.
func (w *wait) done() <-chan struct{} {
	if w.ctx == nil {
		if w.deadline.IsZero() {
			w.ctx = w.parent
		} else {
			w.ctx, w.cancel = context.WithDeadline(w.parent, w.deadline)
		}
	}
	return w.ctx.Done()
}

// expired reports whether the call has already run out of time.
func (w *wait) expired() bool {
	select {
	case <-w.done():
		return true
	default:
		return false
	}
}

func (w *wait) stop() {
	if w.cancel != nil {
		w.cancel()
	}
}

// mapErr turns the internal errWaitDone into what Lock promises: the
// caller's own ctx error wins, otherwise it was our deadline.
func (w *wait) mapErr(err error) error {
	if err != errWaitDone {
		return err
	}
	if e := w.parent.Err(); e != nil {
		return e
	}
	return ErrTimeout
}
