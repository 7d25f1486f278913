package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/routing"
	"github.com/stratanet/strata/swarm"
)

// The entry's adapter from what the swarm and consensus know to what
// routing reads: one routing.NodeState per node of the committed map,
// and the measured round trips. No routing decision is made here.

// phaseOf maps the swarm's heartbeat state to routing's phase, by name:
// the two enums number their values differently.
func phaseOf(s swarm.State) routing.Phase {
	switch s {
	case swarm.StateJoining:
		return routing.Joining
	case swarm.StateWarming:
		return routing.Warming
	case swarm.StateDraining:
		return routing.Draining
	}
	return routing.Serving
}

// healthOf is the routing verdict on a peer table row. A peer whose
// heartbeats are late but whose connection is up stays routable: its
// figures are stale, which the router charges for, but refusing it would
// turn a loaded machine or a gossip hiccup into refused requests. A peer
// whose connection closed, or that is dead, is not routed to. Nor is a
// hint we are not connected to: a peer that died is forgotten and may
// come back as a hint (its address in the map or the members), and
// routing to it would fail every attempt at the dial.
func healthOf(p swarm.Peer) routing.Health {
	switch p.Liveness {
	case swarm.Suspect, swarm.Hint:
		if p.Connected {
			return routing.Alive // a hint we are connected to and have not heard from yet
		}
		return routing.Suspect
	case swarm.Dead:
		return routing.Dead
	}
	return routing.Alive
}

// pathFinder routes for the entry: it builds the routing view of the
// committed map from the peer table, the members' declared capabilities
// and this node's own status, and asks the router. Its times are the
// wall clock's, as the peer table's are (heartbeat and failure times are
// compared with them).
type pathFinder struct {
	self       peer.ID
	profiles   *routing.Profiles
	timer      *pluginTimer // the profiles' observer: per-plugin latency
	host       *swarm.Host
	committed  func() layers.LayerMap
	members    func() []consensus.Member // nil without consensus
	selfState  func(now time.Time) routing.NodeState
	suspectFor time.Duration
	suspects   sync.Map        // peer.ID → time.Time of the last failure seen
	selfKV     func() kvReport // this node's own KV report
	// noMap says why there is no committed map (coverage.noMap); nil: the
	// plain reason. uncovered is the refusal for a committed map with no
	// path whose holders left for good (coverage.uncoveredMap); nil: none.
	noMap     func() error
	uncovered func(layers.LayerMap) error
	// routed is what this entry sent through which paths lately
	// (routed.go); nil: none kept.
	routed *routedPrefixes
}

// ready reports whether this node can route a full path now: nil, or an
// error wrapping ErrNoCapacity that says why not (for a health check),
// ErrUncovered among them when no path can exist until more nodes join;
// ErrClosed once the node's life (alive) ended.
func (f *pathFinder) ready(alive context.Context) error {
	if alive.Err() != nil {
		return ErrClosed
	}
	if _, err := f.route(routeReq{prompt: 1, max: 1}); err != nil {
		if errors.Is(err, ErrNoCapacity) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrNoCapacity, err)
	}
	return nil
}

// noteRouted records that path's hops now hold the prefix of block
// hashes prefix (a generation through them finished).
func (f *pathFinder) noteRouted(path routing.Path, prefix []uint64) {
	if f.routed != nil {
		f.routed.note(path, prefix, time.Now())
	}
}

// kv is what node last reported of its KV cache: its latest heartbeat's
// figures (this node's own status for itself), free unknown when none.
func (f *pathFinder) kv(node string) kvReport {
	if node == f.self.String() {
		if f.selfKV != nil {
			return f.selfKV()
		}
		return kvReport{free: -1}
	}
	id, err := peer.Decode(node)
	if err != nil {
		return kvReport{free: -1}
	}
	row, ok := f.host.Peers().Get(id)
	if !ok || row.Heartbeat == nil {
		return kvReport{free: -1}
	}
	hb := row.Heartbeat
	return kvReport{free: int(hb.FreeKV), sessions: hb.ActiveSessions + hb.QueueDepth, mark: hb}
}

// suspect records that p failed a step now: routing avoids it for
// suspectFor unless it is heard from again.
func (f *pathFinder) suspect(p peer.ID) { f.suspects.Store(p, time.Now()) }

// view builds the routing view of map m as this node sees the swarm now.
func (f *pathFinder) view(m layers.LayerMap, now time.Time) *routing.View {
	v := routing.NewView()
	caps := map[string]layers.Hardware{}
	regions := map[string]string{}
	if f.members != nil {
		for _, mem := range f.members() {
			caps[mem.ID] = mem.Caps.Hardware
			regions[mem.ID] = mem.Caps.Region
		}
	}
	table := f.host.Peers()
	for _, st := range m.Stages {
		ns := routing.NodeState{ID: st.Node, Hardware: caps[st.Node], Region: regions[st.Node]}
		if st.Node == f.self.String() {
			v.Set(f.selfState(now))
			continue
		}
		ns.FreeKV = -1
		id, err := peer.Decode(st.Node)
		if err != nil {
			continue
		}
		if row, ok := table.Get(id); ok {
			ns.Health = healthOf(row)
			// A relayed node's circuit costs what this node measured
			// through it: its pings give the round trips (RTTMatrix),
			// its bandwidth probes the rate.
			ns.Relayed, ns.RelayBandwidth = row.Relayed, row.Bandwidth
			if hb := row.Heartbeat; hb != nil {
				ns.Phase = phaseOf(hb.State)
				ns.QueueDepth, ns.ActiveSessions, ns.FreeKV = hb.QueueDepth, hb.ActiveSessions, int(hb.FreeKV)
				ns.LayerLatency, ns.Updated = hb.LayerLatency.Seconds(), hb.Timestamp
				if hb.Region != "" {
					ns.Region = hb.Region
				}
				if hb.Prefixes != "" {
					// A summary that does not decode is no summary: the
					// node is routed as if its cache were empty.
					ps := &routing.PrefixSummary{}
					if ps.UnmarshalBinary([]byte(hb.Prefixes)) == nil {
						ns.Prefixes = ps
					}
				}
			}
			if t, ok := f.suspects.Load(id); ok && now.Sub(t.(time.Time)) < f.suspectFor && !row.HeardAt.After(t.(time.Time)) {
				ns.Health = max(ns.Health, routing.Suspect)
			}
		} else {
			// Never heard of, nor connected to: the map may name it, but
			// nothing says it runs.
			ns.Health = routing.Suspect
		}
		v.Set(ns)
	}
	for _, p := range f.host.Links().RTTMatrix().Pairs {
		v.SetRTT(p.A.String(), p.B.String(), p.RTT.Seconds())
	}
	return v
}

// routeReq is what the entry asks the router for.
type routeReq struct {
	prompt, max int
	seed        uint64
	avoid       []string
	profile     string        // "" is the default profile
	prefix      []uint64      // block hashes of the tokens so far, for prefix affinity
	pin         *routing.Path // taken while usable (Request.Follow); nil: none
	// busy: the peers this entry has a generation in flight through. A
	// path that holds the request's prefix is not kept to (routed.go)
	// while one of its hops is busy: a prefix many requests share (a
	// system prompt) must not pile them all onto one path.
	busy map[string]bool
}

// route picks a path on the committed map with the request's profile. It
// fails with an error wrapping routing.ErrNoPath when none exists now,
// ErrUncovered when none can until more nodes join (coverage.go), or
// routing.ErrUnknownProfile when the profile does not exist.
func (f *pathFinder) route(q routeReq) (routing.Path, error) {
	pol, err := f.profiles.For(q.profile)
	if err != nil {
		return routing.Path{}, err
	}
	m := f.committed()
	if m.Layers == 0 {
		if f.noMap != nil {
			return routing.Path{}, f.noMap()
		}
		return routing.Path{}, fmt.Errorf("%w: no layer map committed yet", routing.ErrNoPath)
	}
	now := time.Now()
	v := f.view(m, now)
	if q.pin != nil && pinUsable(m, v, *q.pin, q.avoid) {
		return *q.pin, nil
	}
	if f.routed != nil && q.pin == nil {
		if p, _, ok := f.routed.pick(q.prefix, v, now, func(p routing.Path) bool {
			return stickUsable(m, v, p, q.avoid, q.busy, q.prompt+q.max)
		}); ok {
			return p, nil
		}
	}
	p, err := pol.Route(m, v, routing.Request{Entry: f.self.String(), PromptTokens: q.prompt,
		MaxTokens: q.max, Seed: q.seed, Avoid: q.avoid, Prefix: q.prefix}, now)
	if err != nil {
		if f.uncovered != nil && errors.Is(err, routing.ErrNoPath) {
			if u := f.uncovered(m); u != nil {
				return p, u
			}
		}
		return p, err
	}
	if err := p.Validate(m.Layers); err != nil {
		return p, fmt.Errorf("%w: %w", routing.ErrNoPath, err)
	}
	return p, nil
}

// pinUsable reports whether path p still serves on map m and view v:
// each hop's node alive, serving or warming, not avoided, and holding
// the hop's layers on m.
func pinUsable(m layers.LayerMap, v *routing.View, p routing.Path, avoid []string) bool {
	if len(p.Hops) == 0 || p.Validate(m.Layers) != nil {
		return false
	}
	for _, h := range p.Hops {
		st, ok := v.Node(h.Node)
		if !ok || st.Health != routing.Alive || (st.Phase != routing.Serving && st.Phase != routing.Warming) ||
			slices.Contains(avoid, h.Node) {
			return false
		}
		held := false
		for _, s := range m.Stages {
			if s.Node == h.Node && s.Range.Start <= h.From && h.To <= s.Range.End {
				held = true
				break
			}
		}
		if !held {
			return false
		}
	}
	return true
}

// hopsOf turns a path into the hops a step carries.
func hopsOf(p routing.Path) ([]Hop, error) {
	hops := make([]Hop, len(p.Hops))
	for i, h := range p.Hops {
		id, err := peer.Decode(h.Node)
		if err != nil {
			return nil, fmt.Errorf("%w: node %q in the map is not a peer ID: %w", routing.ErrNoPath, h.Node, err)
		}
		hops[i] = Hop{Peer: id, From: h.From, To: h.To}
	}
	return hops, nil
}
