package fs

import (
	"context"
	"sync"
)

// candidates are the nodes that requests being answered made, by their
// cancel channel (unique among requests in flight). go-fuse keeps a node
// a lookup or create returns only if it knows none of the same identity,
// and says nothing of one it drops; made counted each. So a lookup that
// found a known node (every lookup that revalidates a name after its
// entry timeout) left its file counted live for good: never dropped from
// the tables, and a removed file's ghost held its blocks until unmount.
type candidates struct{ m sync.Map }

// add records n, just made (and counted) for the request of ctx.
func (c *candidates) add(ctx context.Context, n *Node) {
	if cancel, ok := replyOf(ctx); ok {
		c.m.Store(cancel, n)
	}
}

// settle forgets the node the request made, if go-fuse dropped it: it
// has taken the node it keeps before the request's reply is written,
// and the kernel cannot forget that one before it has the reply.
func (c *candidates) settle(cancel <-chan struct{}) {
	v, ok := c.m.LoadAndDelete(cancel)
	if !ok {
		return
	}
	n := v.(*Node)
	// Forgotten is deprecated for nodes in use (it is true for a moment
	// before go-fuse adds one); here go-fuse is done with this one.
	if n.EmbeddedInode().Forgotten() {
		n.OnForget()
	}
}
