package node

import (
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
	// RouteErr is why this node cannot route a full path now (Ready's
	// answer), nil when it can: readiness means routable, not merely a
	// map that covers every layer.
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
		Scheduler: n.paths.profiles.Config(), RouteErr: n.Ready(),
		Fetch: n.weights.progress()}
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
