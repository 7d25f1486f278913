package node

import (
	"context"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/swarm"
)

// Drain takes the node out of the swarm without failing a step. It
// announces draining in its heartbeats, so that routing leaves it out of
// new paths and entries move their sessions off it at the next token
// boundary. It leaves Raft, whose leader first moves its layers to other
// nodes (a leader hands its leadership over first), and returns once no
// session is left on its layers. The node serves whatever still reaches
// it until then. A second call is a no-op.
func (n *Node) Drain(ctx context.Context) error {
	if !n.draining.CompareAndSwap(false, true) {
		return nil
	}
	n.log.Info("draining")
	n.publishStatus()
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

// Draining reports whether Drain has begun.
func (n *Node) Draining() bool { return n.draining.Load() }

// drainingHops returns the hops of a path that announced draining.
func (n *Node) drainingHops(hops []Hop) []peer.ID {
	var out []peer.ID
	for _, h := range hops {
		if h.Peer == n.self {
			if n.draining.Load() {
				out = append(out, h.Peer)
			}
			continue
		}
		if p, ok := n.host.Peers().Get(h.Peer); ok && p.Heartbeat != nil && p.Heartbeat.State == swarm.StateDraining {
			out = append(out, h.Peer)
		}
	}
	return out
}
