package fs

import (
	"os"
	"sync/atomic"

	"github.com/safefs/safefs/internal/staging"
)

// Write-behind: a big staging file's bytes are handed to the kernel's
// writeback as they are written. A commit renames the staging file over
// the name, and ext4 then allocates the whole file's delayed blocks and
// submits their writeback before the rename returns (auto_da_alloc, which
// keeps a crash from leaving the name empty): 70-90 ms per 512 MiB inside
// close(). Started in the background while the writer goes on, little of
// it is left by then. A staging file under wbChunk never starts it: a small commit
// costs no call more.
const wbChunk = 8 << 20

// writeBehind is a handle's write-behind state: from (under h.mu) counts
// the bytes of f handed to writeback; busy while a hand-over runs.
type writeBehind struct {
	f    *os.File
	from int64
	busy atomic.Bool
}

// writeBehind hands the staging file's bytes up to end to writeback once
// wbChunk of them wait and no hand-over runs (h.mu held).
func (h *handle) writeBehind(end int64) {
	w := &h.wb
	if w.f != h.p.stage {
		w.f, w.from = h.p.stage, 0
	}
	if end-w.from < wbChunk || !w.busy.CompareAndSwap(false, true) {
		return
	}
	f, from := w.f, w.from
	w.from = end
	go func() {
		defer w.busy.Store(false)
		staging.StartWriteback(f, from, end-from)
	}()
}
