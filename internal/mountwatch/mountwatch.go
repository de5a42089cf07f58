// Package mountwatch looks at a mount every so often and acts once a
// condition has held at two looks a grace apart: fs ends the FUSE
// connection of a mount unmounted here while another mount namespace
// still holds it.
package mountwatch

import "time"

// Watch is the watcher of one mount.
type Watch struct {
	stop chan struct{} // closed by Stop
	done chan struct{} // closed when the watcher returns
}

// Start looks every every: when gone reports true, it looks again
// grace later, and if gone still reports true it calls end. It goes on
// looking until Stop.
func Start(every, grace time.Duration, gone func() bool, end func()) *Watch {
	w := &Watch{stop: make(chan struct{}), done: make(chan struct{})}
	go w.loop(every, grace, gone, end)
	return w
}

func (w *Watch) loop(every, grace time.Duration, gone func() bool, end func()) {
	defer close(w.done)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-w.stop:
			return
		}
		if !gone() {
			continue
		}
		select {
		case <-time.After(grace):
		case <-w.stop:
			return
		}
		if gone() {
			end()
		}
	}
}

// Stop stops the watcher and waits for it.
func (w *Watch) Stop() {
	close(w.stop)
	<-w.done
}
