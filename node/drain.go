package node

import (
	"context"
	"fmt"
	"time"
)

// Drain takes the node out of the swarm without failing a step. It
// announces draining in its heartbeats, so that routing leaves it out of
// new paths and entries move their sessions off it at the next token
// boundary. It leaves Raft, whose leader first moves its layers to other
// nodes (a leader hands its leadership over first), and returns once no
// session is left on its layers. The node serves whatever still reaches
// it until then. A second call is a no-op.
func (n *Node) Drain(ctx context.Context) error {
	if !n.ann.draining.CompareAndSwap(false, true) {
		return nil
	}
	n.log.Info("draining")
	n.ann.publish()
	// The leader moves this node's layers to others before it lets it go,
	// so that entries always have somewhere to move to.
	if c := n.cons.Load(); c != nil {
		if len(c.Members()) <= 1 {
			// The last member: nobody to hand layers to, nothing to wait for.
			if err := c.Close(); err != nil {
				return fmt.Errorf("node: drain: %w", err)
			}
		} else if err := c.Leave(ctx); err != nil {
			return fmt.Errorf("node: drain: %w", err)
		}
	}
	// Entries learn of the drain from the next heartbeat and move at their
	// next token; wait for the sessions here to go, within ctx.
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for n.Metrics().Sessions > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("node: drain: %d session(s) still here: %w", n.Metrics().Sessions, ctx.Err())
		case <-t.C:
		}
	}
	n.log.Info("drained")
	return nil
}
