package node

import (
	"context"
	"fmt"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/routing"
	"github.com/stratanet/strata/swarm"
)

// SwarmSnapshot is what a node knows of its swarm at one moment, as plain
// data: the replicated state (from consensus) and the peer table (from
// the swarm). It is what node/api reads, so that the API depends on data
// rather than on the consensus replica and the host.
type SwarmSnapshot struct {
	// Static: the node has no consensus replica (a static map, or one
	// still starting); the replica's fields below are zero.
	Static     bool
	Leader     peer.ID // empty when no leader is known
	IsLeader   bool
	Voters     []peer.ID
	Members    []consensus.Member
	Pending    consensus.Pending
	HasPending bool
	// The swarm's replicated configuration: the verify rate and the
	// planner's session length, each when set (Has...).
	VerifyRate       float64
	HasVerifyRate    bool
	SessionTokens    int
	HasSessionTokens bool
	// Stewards are the swarm's stewards, the only voters (none: anyone
	// stable may vote).
	Stewards []string

	// Self is what this node announces now; Hardware the device it
	// declared or measured; Addrs its listen addresses.
	Self swarm.Status
	// Held is the range of layers this node has loaded and serves
	// (empty when none; the loaded layers are contiguous in practice,
	// and the range spans them).
	Held     layers.Range
	Hardware layers.Hardware
	// Scheduler is the entry's effective scheduling configuration.
	Scheduler routing.SchedulerConfig
	// RouteErr is why this node cannot route a full path now, nil when
	// it can: readiness means routable, not merely a map that covers
	// every layer. It wraps ErrNoCapacity (ErrUncovered when no path can
	// exist until more nodes join), or is ErrClosed.
	RouteErr error
	Addrs    []ma.Multiaddr
	// Peers is the peer table, this node excluded.
	Peers []swarm.Peer
	// NAT is this node's reachability diagnosis.
	NAT swarm.NATStatus
	// Fetch is this node's fetch of weights from peers (zero for a node
	// with the model file).
	Fetch FetchProgress
}

// Swarm returns the node's view of the swarm now.
func (n *Node) Swarm() SwarmSnapshot {
	s := SwarmSnapshot{Self: n.host.Beats().Status(), Held: n.ann.held(), Hardware: n.hw, Addrs: n.host.Addrs(), NAT: n.host.Links().NAT(),
		Scheduler: n.paths.profiles.Config(), RouteErr: n.paths.ready(n.ctx),
		Fetch: n.weights.Progress()}
	for _, p := range n.host.Peers().Snapshot() {
		if p.ID != n.self {
			s.Peers = append(s.Peers, p)
		}
	}
	c := n.cons.Load()
	if c == nil {
		s.Static = true
		return s
	}
	if l, ok := c.Leader(); ok {
		s.Leader = l
	}
	s.IsLeader = c.IsLeader()
	if servers, err := c.Servers(); err == nil {
		for _, sv := range servers {
			if sv.Voter {
				s.Voters = append(s.Voters, sv.ID)
			}
		}
	}
	s.Members = c.Members()
	s.Pending, s.HasPending = c.Pending()
	st := c.State()
	s.VerifyRate, s.HasVerifyRate = st.SwarmConfig().VerifyRate()
	s.SessionTokens, s.HasSessionTokens = st.SwarmConfig().SessionTokens()
	s.Stewards = st.Stewards().List()
	return s
}

// SwarmChange is a change to the swarm's replicated configuration: each
// field that is set (non-nil) is changed, the rest stay as they are.
type SwarmChange struct {
	// VerifyRate is the swarm's verify rate; entries without their own
	// rate follow it.
	VerifyRate *float64
	// SessionTokens is the mean session length the planner caps each
	// node's KV memory by (0: no cap).
	SessionTokens *int
	// Stewards makes these peer IDs the swarm's stewards, the only nodes
	// that vote, signed with this node's host key. The swarm admits it
	// only from its founder (the first set) or a steward
	// (consensus.ErrBadStewards).
	Stewards []string
}

// SetSwarmConfig applies ch to the swarm's replicated configuration, its
// fields in the order above, and stops at the first that fails. Only the
// leader may (consensus.ErrNotLeader elsewhere, ErrNotServing on a static
// map). A caller that must know which field failed sets one at a time.
func (n *Node) SetSwarmConfig(ctx context.Context, ch SwarmChange) error {
	c := n.cons.Load()
	if ch.VerifyRate != nil {
		if c == nil {
			return fmt.Errorf("%w: no consensus (static map): no swarm rate to set", ErrNotServing)
		}
		if err := c.SetVerifyRate(ctx, *ch.VerifyRate); err != nil {
			return err
		}
	}
	if ch.SessionTokens != nil {
		if c == nil {
			return fmt.Errorf("%w: no consensus (static map): no swarm planner to set", ErrNotServing)
		}
		if err := c.SetSessionTokens(ctx, *ch.SessionTokens); err != nil {
			return err
		}
	}
	if ch.Stewards != nil {
		if c == nil {
			return fmt.Errorf("%w: no consensus (static map): no voters to choose", ErrNotServing)
		}
		if err := c.SetStewards(ctx, ch.Stewards); err != nil {
			return err
		}
	}
	return nil
}
