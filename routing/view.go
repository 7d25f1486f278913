package routing

import (
	"time"

	"github.com/stratanet/strata/layers"
)

// Health is the peer table's verdict on a node.
type Health uint8

// The verdicts. Alive is the zero value: a node the caller put in the view
// without saying otherwise has been heard from.
const (
	Alive   Health = iota
	Suspect        // missed heartbeats or failed a hop: not routed to
	Dead           // gone: not routed to
)

func (h Health) String() string {
	switch h {
	case Alive:
		return "alive"
	case Suspect:
		return "suspect"
	case Dead:
		return "dead"
	}
	return "unknown"
}

// Phase is the state a node announces in its heartbeats.
type Phase uint8

// The phases. Serving is the zero value, the common case. A warming node
// still serves its committed range while it loads a new one (make before
// break), so it stays routable; joining and draining nodes do not.
const (
	Serving Phase = iota
	Warming
	Joining
	Draining
)

func (p Phase) String() string {
	switch p {
	case Serving:
		return "serving"
	case Warming:
		return "warming"
	case Joining:
		return "joining"
	case Draining:
		return "draining"
	}
	return "unknown"
}

// NodeState is what the entry knows about one node: its liveness from the
// peer table and its load from its latest heartbeat.
type NodeState struct {
	ID      string
	Health  Health
	Phase   Phase
	Region  string // coarse location; unmeasured links are estimated per region pair
	Relayed bool   // reachable only through a circuit relay: its links cost more
	// RelayBandwidth is the measured bytes per second of a relayed node's
	// circuit; 0 means unmeasured and Config.RelayBandwidth stands in.
	RelayBandwidth float64

	// Hardware is the node's declared or measured device. The zero value
	// means unknown: the router then uses its fleet's profile or its
	// default device.
	Hardware layers.Hardware
	// Speed scales modelled throughput by what was measured (0: as modelled).
	Speed float64

	// QueueDepth is the sessions the node has accepted that wait for KV
	// memory before they join its batch (node/scheduler.go's FIFO, sent in
	// the heartbeat). The node admits them before any new session, so a
	// new one there waits behind them: the router charges such a node as
	// short of KV (Estimate.KVShort) and counts them in the batch it
	// expects (Estimate.Batch).
	QueueDepth     int
	ActiveSessions int // sessions holding KV on the node (in its batch)
	// FreeKV is the KV cache left, in tokens. Zero means full; a negative
	// value means the node did not report it.
	FreeKV int
	// LayerLatency is the heartbeat's EWMA of one layer's time over every
	// batch the node ran, prefills included, in seconds: what a step
	// arriving now waits behind, so it carries prefill load. Zero or invalid means unknown: the
	// router then uses the cost model.
	LayerLatency float64
	// Updated is when the load figures were measured (the heartbeat's
	// timestamp). The zero time means never: the figures count as stale.
	Updated time.Time
	// Prefixes summarises the block hashes in the node's prefix cache, from
	// its heartbeat; nil means none reported. It is shared, not copied, by
	// View.Clone: replace it, never change it in place.
	Prefixes *PrefixSummary
}

// MaxRegions is how many distinct regions a view tells apart. Regions past
// it share the estimates of nodes with no region, which keeps the router's
// per-layer work bounded whatever peers announce.
const MaxRegions = 16

type link struct {
	peer int32
	rtt  float64
}

// View is the entry's picture of the swarm: node states by ID and the
// measured round-trip times between pairs of nodes. The caller owns it and
// updates it as heartbeats and pings arrive; routers only read it. A View
// is not safe for concurrent mutation, but any number of routes may read it
// at once while nobody writes.
type View struct {
	nodes   []NodeState
	zone    []int32 // region index of each node, 0 for none
	adj     [][]link
	index   map[string]int32
	regions map[string]int32 // interned regions, indices 1..MaxRegions

	// Sum (in whole nanoseconds, so that the order of updates cannot
	// change it) and count of the measured round trips per region pair,
	// kept up to date so that routing reads region means in O(regions²)
	// instead of walking every link.
	rsum [zones * zones]int64
	rcnt [zones * zones]int64
}

const zones = MaxRegions + 1

// sumNanos is a round trip as counted in the region sums; capping it at
// 1,000 s keeps any number of links from overflowing them.
func sumNanos(rtt float64) int64 { return int64(min(rtt, 1000) * 1e9) }

// count adds (sign 1) or removes (sign -1) the link i–j of round trip rtt
// from the region sums, in both directions.
func (v *View) count(i, j int32, rtt float64, sign int64) {
	a, b := v.zone[i], v.zone[j]
	ns := sumNanos(rtt) * sign
	v.rsum[a*zones+b] += ns
	v.rsum[b*zones+a] += ns
	v.rcnt[a*zones+b] += sign
	v.rcnt[b*zones+a] += sign
}

// rezone moves node i to the zone of its region, moving its links' counts.
func (v *View) rezone(i int32) {
	z := v.zoneOf(v.nodes[i].Region)
	if z == v.zone[i] {
		return
	}
	for _, l := range v.adj[i] {
		v.count(i, l.peer, l.rtt, -1)
	}
	v.zone[i] = z
	for _, l := range v.adj[i] {
		v.count(i, l.peer, l.rtt, 1)
	}
}

// NewView returns a view holding the given states. Later duplicates win.
func NewView(states ...NodeState) *View {
	v := &View{
		index:   make(map[string]int32, len(states)),
		regions: make(map[string]int32),
	}
	for _, s := range states {
		v.Set(s)
	}
	return v
}

// Len is the number of nodes in the view.
func (v *View) Len() int {
	if v == nil {
		return 0
	}
	return len(v.nodes)
}

func (v *View) lookup(id string) (int32, bool) {
	if v == nil {
		return 0, false
	}
	i, ok := v.index[id]
	return i, ok
}

func (v *View) zoneOf(region string) int32 {
	if region == "" {
		return 0
	}
	if z, ok := v.regions[region]; ok {
		return z
	}
	if len(v.regions) >= MaxRegions {
		return 0
	}
	z := int32(len(v.regions) + 1)
	v.regions[region] = z
	return z
}

// Set stores a node's state, replacing any earlier one. It reports false,
// storing nothing, when the state has no ID.
func (v *View) Set(n NodeState) bool {
	if n.ID == "" {
		return false
	}
	if i, ok := v.index[n.ID]; ok {
		v.nodes[i] = n
		v.rezone(i)
		return true
	}
	v.index[n.ID] = int32(len(v.nodes))
	v.nodes = append(v.nodes, n)
	v.zone = append(v.zone, v.zoneOf(n.Region))
	v.adj = append(v.adj, nil)
	return true
}

// Node returns a node's state.
func (v *View) Node(id string) (NodeState, bool) {
	if i, ok := v.lookup(id); ok {
		return v.nodes[i], true
	}
	return NodeState{}, false
}

// Update applies f to a node's state in place, so that a caller can bump a
// queue depth without copying the state out and back. It reports whether
// the node is in the view. f must not change the ID.
func (v *View) Update(id string, f func(*NodeState)) bool {
	i, ok := v.lookup(id)
	if !ok {
		return false
	}
	n := &v.nodes[i]
	f(n)
	n.ID = id
	v.rezone(i)
	return true
}

// Remove drops a node and its links.
func (v *View) Remove(id string) {
	i, ok := v.lookup(id)
	if !ok {
		return
	}
	for _, l := range v.adj[i] {
		v.count(i, l.peer, l.rtt, -1)
		v.adj[l.peer] = dropLink(v.adj[l.peer], i)
	}
	last := int32(len(v.nodes) - 1)
	if i != last {
		// The last node takes the freed slot: repoint its peers' links.
		v.nodes[i], v.zone[i], v.adj[i] = v.nodes[last], v.zone[last], v.adj[last]
		v.index[v.nodes[i].ID] = i
		for _, l := range v.adj[i] {
			for k := range v.adj[l.peer] {
				if v.adj[l.peer][k].peer == last {
					v.adj[l.peer][k].peer = i
				}
			}
		}
	}
	v.nodes[last] = NodeState{}
	v.adj[last] = nil
	v.nodes, v.zone, v.adj = v.nodes[:last], v.zone[:last], v.adj[:last]
	delete(v.index, id)
}

func dropLink(ls []link, peer int32) []link {
	for k := range ls {
		if ls[k].peer == peer {
			ls[k] = ls[len(ls)-1]
			return ls[:len(ls)-1]
		}
	}
	return ls
}

// SetRTT records the measured round-trip time between two nodes, in
// seconds, for both directions. It reports false, storing nothing, when
// either node is not in the view, when a == b, or when rtt is not a finite
// positive number: an unmeasured link is better than a wrong one.
func (v *View) SetRTT(a, b string, rtt float64) bool {
	i, ok1 := v.lookup(a)
	j, ok2 := v.lookup(b)
	if !ok1 || !ok2 || i == j || !(rtt > 0) || rtt > maxSeconds {
		return false
	}
	if old, ok := v.rttIdx(i, j); ok {
		v.count(i, j, old, -1)
	}
	v.count(i, j, rtt, 1)
	v.adj[i] = putLink(v.adj[i], j, rtt)
	v.adj[j] = putLink(v.adj[j], i, rtt)
	return true
}

func putLink(ls []link, peer int32, rtt float64) []link {
	for k := range ls {
		if ls[k].peer == peer {
			ls[k].rtt = rtt
			return ls
		}
	}
	return append(ls, link{peer, rtt})
}

// regionRTT is the mean measured round trip between two zones, in
// seconds, and whether any was measured.
func (v *View) regionRTT(a, b int32) (float64, bool) {
	n := v.rcnt[a*zones+b]
	if n <= 0 {
		return 0, false
	}
	return float64(v.rsum[a*zones+b]) / float64(n) / 1e9, true
}

// RTT returns the measured round-trip time between two nodes.
func (v *View) RTT(a, b string) (float64, bool) {
	i, ok1 := v.lookup(a)
	j, ok2 := v.lookup(b)
	if !ok1 || !ok2 {
		return 0, false
	}
	return v.rttIdx(i, j)
}

func (v *View) rttIdx(i, j int32) (float64, bool) {
	for _, l := range v.adj[i] {
		if l.peer == j {
			return l.rtt, true
		}
	}
	return 0, false
}

// Clone returns a deep copy, so that a caller can route on a snapshot
// while it keeps updating the original.
func (v *View) Clone() *View {
	c := &View{
		nodes:   append([]NodeState(nil), v.nodes...),
		zone:    append([]int32(nil), v.zone...),
		adj:     make([][]link, len(v.adj)),
		index:   make(map[string]int32, len(v.index)),
		regions: make(map[string]int32, len(v.regions)),
		rsum:    v.rsum,
		rcnt:    v.rcnt,
	}
	for i, ls := range v.adj {
		c.adj[i] = append([]link(nil), ls...)
	}
	for k, x := range v.index {
		c.index[k] = x
	}
	for k, x := range v.regions {
		c.regions[k] = x
	}
	return c
}
