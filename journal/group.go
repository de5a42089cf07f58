package journal

import "sync"

// GroupSync lets concurrent callers share one fsync: a caller needs a
// sync that starts after its own write, so while one runs the callers
// that arrive wait and the first of them runs the next for all. Under
// load a burst of commits costs two fsyncs instead of one each.
type GroupSync struct {
	mu       sync.Mutex
	cond     *sync.Cond
	running  bool
	started  uint64 // syncs started; the one running, if any, is number started
	finished uint64 // syncs finished, in order
	errGen   uint64 // the last sync that failed, and its error
	err      error
}

// Do runs fsync, or waits for a run of it that started after Do was
// called, and returns that run's error.
func (g *GroupSync) Do(fsync func() error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cond == nil {
		g.cond = &sync.Cond{L: &g.mu}
	}
	want := g.started + 1 // a running sync may have started before our write
	for g.finished < want {
		if g.running {
			g.cond.Wait()
			continue
		}
		g.running = true
		g.started++
		gen := g.started
		g.mu.Unlock()
		err := fsync()
		g.mu.Lock()
		g.running, g.finished = false, gen
		if err != nil {
			g.errGen, g.err = gen, err
		}
		g.cond.Broadcast()
	}
	if g.errGen >= want {
		// Ours or a later one failed: whether our write is durable is unknown.
		return g.err
	}
	return nil
}
