// Package monitor is Strata's public health monitor: a read-only libp2p
// host that finds the members of the swarms it can see (through the DHT
// or given addresses), asks each for its signed snapshot (swarm's
// monitor protocol), and aggregates them per swarm: the model, layer
// coverage and redundancy, the nodes with their reachability, and the
// throughput their signed heartbeats' counters show. It joins no Raft,
// sends no heartbeats and serves no layers.
package monitor

import (
	"cmp"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/swarm"
)

// Observation is what the crawler got from one peer.
type Observation struct {
	Peer peer.ID
	// Snapshot is the peer's answer; nil when none came. With Verified
	// false it is what the answer claimed, under a signature that did
	// not verify: shown, never counted.
	Snapshot *swarm.Snapshot
	Verified bool
	// Err is why there is no verified snapshot.
	Err string
	// Via is the member that forwarded the request ("" asked directly:
	// the monitor could dial the peer).
	Via peer.ID
	// SeenBy is the members whose link reports named the peer.
	SeenBy []peer.ID
}

// Reachability classes of a node, as the monitor shows them.
const (
	ReachDirect      = "direct"       // peers dial it; no relay
	ReachHolePunched = "hole-punched" // behind NAT, with links DCUtR made direct
	ReachRelayed     = "relayed"      // behind NAT, reachable through relays only
	ReachUnknown     = "unknown"
)

// Swarm is one swarm as the monitor sees it.
type Swarm struct {
	Name        string `json:"name"`
	Model       string `json:"model"`
	Fingerprint string `json:"fingerprint"`
	// Founder is the peer ID whose signature on the swarm's charter its
	// members carry ("": none, a swarm that is not public or predates
	// charters). Rival swarms under one name and model are listed apart.
	Founder string `json:"founder,omitempty"`
	Layers  int    `json:"layers"`
	// Coverage is over the layers that verified serving nodes announce
	// in their heartbeats.
	Coverage Coverage `json:"coverage"`
	// MapEpoch and MapCoverage are the newest layer map a verified
	// member routes on (0 and empty: none seen).
	MapEpoch    uint64   `json:"map_epoch"`
	MapCoverage Coverage `json:"map_coverage"`
	// TokensPerSec is the tokens the swarm's entries delivered per
	// second, summed over nodes with two heartbeats to compare.
	TokensPerSec float64 `json:"tokens_per_sec"`
	Nodes        []Node  `json:"nodes"`
	Verified     int     `json:"verified"` // nodes whose snapshot verified
}

// Coverage is how many nodes serve each layer, in runs.
type Coverage struct {
	Covered bool `json:"covered"` // every layer has a node
	// Min and Max redundancy over the layers.
	Min  int   `json:"min_redundancy"`
	Max  int   `json:"max_redundancy"`
	Runs []Run `json:"runs"`
	// Gaps are the runs no node serves.
	Gaps []Run `json:"gaps,omitempty"`
}

// Run is layers [Start, End) served by Nodes nodes each.
type Run struct {
	Start int `json:"start"`
	End   int `json:"end"`
	Nodes int `json:"nodes"`
}

// Node is one member.
type Node struct {
	ID       string `json:"id"`
	Verified bool   `json:"verified"`
	// Error says why the node is not verified: its answer's signature
	// failed, it could not be reached, it was only named by peers.
	Error string `json:"error,omitempty"`
	State string `json:"state,omitempty"`
	// Range is the layers its latest heartbeat announces ("" none).
	RangeStart int `json:"range_start"`
	RangeEnd   int `json:"range_end"`
	// Reachability is the class (direct, hole-punched, relayed,
	// unknown); NAT the node's own AutoNAT verdict; RelayedOnly its
	// heartbeat's flag (it advertises relay addresses only).
	Reachability string `json:"reachability"`
	NAT          string `json:"nat,omitempty"`
	RelayedOnly  bool   `json:"relayed_only"`
	// Links counts the node's links by kind, as it reports them.
	Links map[string]int `json:"links,omitempty"`
	// Via: the monitor reached the node through this member.
	Via          string  `json:"via,omitempty"`
	TokensPerSec float64 `json:"tokens_per_sec"`
	StepsPerSec  float64 `json:"steps_per_sec"`
	TokensServed uint64  `json:"tokens_served"`
	Region       string  `json:"region,omitempty"`
	Engine       string  `json:"engine,omitempty"`
	// HeartbeatAge is how old its latest heartbeat was when it answered.
	HeartbeatAge float64 `json:"heartbeat_age_s"`
	// CharterError says why the swarm charter it carried did not verify
	// (it is then listed under no founder).
	CharterError string `json:"charter_error,omitempty"`
}

// Aggregate groups observations into swarms: by the swarm name and model
// fingerprint verified snapshots name, and the founder whose signature
// their charter carries. A forged or failed snapshot is
// listed under the swarm it claims, or the swarm of the members that
// named the peer, and counts in no figure.
func Aggregate(obs []Observation) []Swarm {
	type key struct{ name, fp, founder string }
	keyOf := func(s *swarm.Snapshot) (key, error) {
		f, err := swarm.SnapshotFounder(s)
		return key{s.Swarm, s.Fingerprint, string(f)}, err
	}
	groups := map[key]*Swarm{}
	group := func(k key) *Swarm {
		if g := groups[k]; g != nil {
			return g
		}
		g := &Swarm{Name: k.name, Fingerprint: k.fp}
		if k.founder != "" {
			g.Founder = peer.ID(k.founder).String()
		}
		groups[k] = g
		return g
	}
	swarmOf := map[peer.ID]key{}
	// Links as the verified members report them, by peer reported.
	reported := map[peer.ID][]swarm.Link{}
	for _, o := range obs {
		if o.Verified && o.Snapshot != nil {
			swarmOf[o.Peer], _ = keyOf(o.Snapshot)
			for _, p := range o.Snapshot.Peers {
				if p.Link != swarm.LinkNone {
					reported[p.Peer] = append(reported[p.Peer], p.Link)
				}
			}
		}
	}
	maps := map[key]layers.LayerMap{}
	for _, o := range obs {
		s := o.Snapshot
		var k key
		var charterErr error
		switch {
		case s != nil:
			k, charterErr = keyOf(s)
		default:
			found := false
			for _, by := range o.SeenBy {
				if bk, ok := swarmOf[by]; ok {
					k, found = bk, true
					break
				}
			}
			if !found {
				k = key{"?", "", ""}
			}
		}
		g := group(k)
		n := Node{ID: o.Peer.String(), Verified: o.Verified && s != nil, Error: o.Err, Reachability: ReachUnknown}
		if o.Via != "" {
			n.Via = o.Via.String()
		}
		if s != nil {
			describe(&n, s, reported[o.Peer], o.Via == "")
		}
		if charterErr != nil {
			n.CharterError = charterErr.Error()
		}
		if n.Verified {
			g.Verified++
			if g.Model == "" {
				g.Model, g.Layers = s.ModelName, s.Layers
			}
			g.TokensPerSec += n.TokensPerSec
			var m layers.LayerMap
			if len(s.Map) > 0 && m.UnmarshalBinary(s.Map) == nil && m.Epoch >= maps[k].Epoch {
				maps[k] = m
			}
		}
		g.Nodes = append(g.Nodes, n)
	}
	out := make([]Swarm, 0, len(groups))
	for k, g := range groups {
		var served []layers.Range
		for _, n := range g.Nodes {
			if n.Verified && n.State == swarm.StateServing.String() && n.RangeEnd > n.RangeStart {
				served = append(served, layers.Range{Start: n.RangeStart, End: n.RangeEnd})
			}
		}
		g.Coverage = coverage(g.Layers, served)
		if m, ok := maps[k]; ok {
			g.MapEpoch = m.Epoch
			var planned []layers.Range
			for _, st := range m.Stages {
				planned = append(planned, layers.Range{Start: st.Start, End: st.End})
			}
			g.MapCoverage = coverage(m.Layers, planned)
		}
		slices.SortFunc(g.Nodes, func(a, b Node) int {
			return cmp.Or(cmp.Compare(a.RangeStart, b.RangeStart), cmp.Compare(a.ID, b.ID))
		})
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b Swarm) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Fingerprint, b.Fingerprint), cmp.Compare(a.Founder, b.Founder))
	})
	return out
}

// describe fills n from its snapshot and the links peers reported to
// it; dialled: the monitor reached it on a direct connection of its own.
func describe(n *Node, s *swarm.Snapshot, reported []swarm.Link, dialled bool) {
	n.NAT = s.Reachability
	n.Links = map[string]int{}
	punched := slices.Contains(reported, swarm.LinkHolePunched)
	for _, p := range s.Peers {
		// Members only: a hint is anyone connected (this monitor too).
		if p.Link != swarm.LinkNone && (p.Liveness == swarm.Alive || p.Liveness == swarm.Suspect) {
			n.Links[string(p.Link)]++
			punched = punched || p.Link == swarm.LinkHolePunched
		}
	}
	if len(s.Heartbeats) > 0 {
		last := s.Heartbeats[len(s.Heartbeats)-1]
		n.State = last.State.String()
		n.RangeStart, n.RangeEnd = last.RangeStart, last.RangeEnd
		n.RelayedOnly = last.Relayed()
		n.Region, n.Engine = last.Region, last.Engine
		n.TokensServed = last.TokensServed
		n.HeartbeatAge = max(0, s.Time.Sub(last.Timestamp).Seconds())
		if len(s.Heartbeats) > 1 {
			first := s.Heartbeats[0]
			if dt := last.Timestamp.Sub(first.Timestamp); dt > 0 {
				n.TokensPerSec = rate(first.TokensServed, last.TokensServed, dt)
				n.StepsPerSec = rate(first.StepsRun, last.StepsRun, dt)
			}
		}
	}
	n.Reachability = classify(s.Reachability, n.RelayedOnly, punched, dialled)
}

// classify: a node public by AutoNAT, or not yet judged but dialled by
// the monitor, and advertising direct addresses, is direct. Behind NAT a
// hole-punched link (its own report or a peer's) means some peers reach
// it directly; without one, relay-only addresses or a private verdict
// mean relayed.
func classify(nat string, relayedOnly, punched, dialled bool) string {
	switch {
	case !relayedOnly && (nat == "public" || (nat == "unknown" && dialled)):
		return ReachDirect
	case punched:
		return ReachHolePunched
	case relayedOnly || nat == "private":
		return ReachRelayed
	}
	return ReachUnknown
}

// rate is a counter's increase per second; a counter that went down
// (the node restarted between the heartbeats) gives 0.
func rate(from, to uint64, dt time.Duration) float64 {
	if to < from {
		return 0
	}
	return float64(to-from) / dt.Seconds()
}

// coverage counts the ranges over n layers (ranges past n are clipped).
func coverage(n int, ranges []layers.Range) Coverage {
	c := Coverage{}
	if n <= 0 {
		return c
	}
	count := make([]int, n)
	for _, r := range ranges {
		for l := max(r.Start, 0); l < min(r.End, n); l++ {
			count[l]++
		}
	}
	c.Min, c.Max = slices.Min(count), slices.Max(count)
	c.Covered = c.Min > 0
	for l := 0; l < n; {
		e := l
		for e < n && count[e] == count[l] {
			e++
		}
		r := Run{Start: l, End: e, Nodes: count[l]}
		c.Runs = append(c.Runs, r)
		if r.Nodes == 0 {
			c.Gaps = append(c.Gaps, r)
		}
		l = e
	}
	return c
}
