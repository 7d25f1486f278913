package node

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/swarm"
)

// swarmTrust is what the entry's spot checks learn from the swarm: who
// computes reproducibly, who holds which layers, the replicated verify
// rate, and where fault evidence goes. It reads the peer table, the
// committed map and the consensus replica; the checks' decisions are
// the entry's and package trust's.
type swarmTrust struct {
	self      peer.ID
	engine    string // this node's engine, as its heartbeats name it ("": the pure-Go engine)
	peers     *swarm.PeerTable
	committed func() layers.LayerMap
	cons      *atomic.Pointer[consensus.Consensus] // nil inside: a static map, or still starting
}

// reproducible reports whether p computes on the bit-reproducible
// pure-Go engine: this node by its own engine, a peer by its latest
// heartbeat (which names any other engine). A peer not heard yet is not
// taken for one: it is checked by tolerance from its first step (and, if
// it then signs as go, exactly: exactSettle) until its heartbeat says go.
func (t *swarmTrust) reproducible(p peer.ID) bool {
	if p == t.self {
		return t.engine == ""
	}
	pr, ok := t.peers.Get(p)
	return ok && pr.Heartbeat != nil && pr.Heartbeat.Engine == ""
}

// holders lists the peers whose committed range covers [from, to).
func (t *swarmTrust) holders(from, to int) []peer.ID {
	var out []peer.ID
	for _, st := range t.committed().Stages {
		if st.Range.Start <= from && to <= st.Range.End {
			if p, err := peer.Decode(st.Node); err == nil {
				out = append(out, p)
			}
		}
	}
	return out
}

// reportFault hands evidence to the leader through consensus.
func (t *swarmTrust) reportFault(ctx context.Context, ev consensus.Evidence) error {
	c := t.cons.Load()
	if c == nil {
		return fmt.Errorf("%w: no consensus (static map): cannot report a fault", ErrNotServing)
	}
	return c.ReportFault(ctx, ev)
}

// swarmVerifyRate is the replicated rate (false: none, or no consensus).
func (t *swarmTrust) swarmVerifyRate() (float64, bool) {
	if c := t.cons.Load(); c != nil {
		return c.State().SwarmConfig().VerifyRate()
	}
	return 0, false
}
