package trust

import (
	"context"
	"errors"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/swarm"
)

// ErrNoConsensus: fault evidence has nowhere to go (a static map, or a
// replica still starting).
var ErrNoConsensus = errors.New("trust: no consensus (static map): cannot report a fault")

// Peers is what the checks read of the peer table (*swarm.PeerTable):
// a peer's latest heartbeat, which names its engine.
type Peers interface {
	Get(peer.ID) (swarm.Peer, bool)
}

// Replica is what the checks need of the consensus replica
// (*consensus.Consensus): where fault evidence goes, and the replicated
// state the swarm's verify rate is read from.
type Replica interface {
	ReportFault(context.Context, consensus.Evidence) error
	State() consensus.State
}

// Swarm is what an entry's spot checks learn from the swarm: who
// computes reproducibly, who holds which layers, the replicated verify
// rate, and where fault evidence goes. It only reads its sources; the
// checks' decisions are the entry's and this package's functions.
type Swarm struct {
	Self   peer.ID
	Engine string // this node's engine, as its heartbeats name it ("": the pure-Go engine)
	Peers  Peers
	// Committed is the committed layer map the entry routes on.
	Committed func() layers.LayerMap
	// Replica is the consensus replica now; nil when there is none (a
	// static map, or still starting).
	Replica func() Replica
}

// Reproducible reports whether p computes on the bit-reproducible
// pure-Go engine: this node by its own engine, a peer by its latest
// heartbeat (which names any other engine). A peer not heard yet is not
// taken for one: it is checked by tolerance from its first step (and, if
// it then signs as go, exactly) until its heartbeat says go.
func (t *Swarm) Reproducible(p peer.ID) bool {
	if p == t.Self {
		return t.Engine == ""
	}
	pr, ok := t.Peers.Get(p)
	return ok && pr.Heartbeat != nil && pr.Heartbeat.Engine == ""
}

// Holders lists the peers whose committed range covers [from, to).
func (t *Swarm) Holders(from, to int) []peer.ID {
	var out []peer.ID
	for _, st := range t.Committed().Stages {
		if st.Range.Start <= from && to <= st.Range.End {
			if p, err := peer.Decode(st.Node); err == nil {
				out = append(out, p)
			}
		}
	}
	return out
}

// ReportFault hands evidence to the leader through consensus;
// ErrNoConsensus without a replica.
func (t *Swarm) ReportFault(ctx context.Context, ev consensus.Evidence) error {
	c := t.replica()
	if c == nil {
		return ErrNoConsensus
	}
	return c.ReportFault(ctx, ev)
}

// VerifyRate is the replicated rate (false: none, or no consensus).
func (t *Swarm) VerifyRate() (float64, bool) {
	if c := t.replica(); c != nil {
		return c.State().SwarmConfig().VerifyRate()
	}
	return 0, false
}

func (t *Swarm) replica() Replica {
	if t.Replica == nil {
		return nil
	}
	return t.Replica()
}
