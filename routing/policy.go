package routing

import (
	"errors"
	"time"

	"github.com/stratanet/strata/layers"
)

// Errors, testable with errors.Is.
var (
	// ErrNoPath reports that no chain of eligible nodes covers [0, L).
	ErrNoPath = errors.New("routing: no path")
	// ErrBadPath reports hops that do not chain exactly over [0, L).
	ErrBadPath = errors.New("routing: bad path")
	// ErrWrongModel reports a map whose layer count is not the model's.
	ErrWrongModel = errors.New("routing: map does not fit the model")
	// ErrConfig reports an unusable option or configuration.
	ErrConfig = errors.New("routing: bad config")
)

// Policy chooses a path for a request. The DP Router and the round-robin
// baseline both implement it, so that callers and comparisons can swap one
// for the other.
type Policy interface {
	Route(m layers.LayerMap, v *View, req Request, now time.Time) (Path, error)
}

// Request is what the router needs to know about one request.
type Request struct {
	// Entry is the node that drives the request: every step starts and ends
	// there, so its links to the first and last hops count. Empty: not
	// charged.
	Entry        string
	PromptTokens int
	// MaxTokens is the output the request may produce (0: the config's
	// DefaultOutputTokens). With the prompt it is the session's KV need.
	MaxTokens int
	// Seed drives the random choice among near-best paths: the same seed
	// over the same inputs gives the same path.
	Seed uint64
	// Avoid lists nodes this request must not use, such as the hop that
	// just failed it.
	Avoid []string
	// Prefix is the prompt's block hash chain (BlockHashes in blocks of
	// PrefixBlock): a node whose summary (NodeState.Prefixes) holds its
	// first blocks is estimated to prefill only the rest, and the
	// prefix-affinity scorer reads it too. Nil when the entry did not
	// compute it.
	Prefix []uint64
}

// Tokens is the KV cache, in tokens, the session needs on each hop.
func (r *Request) Tokens() int { return r.PromptTokens + r.MaxTokens }

// Filter drops nodes a request must not use. Filters run before scoring;
// a node any filter drops is not in the DP at all.
type Filter interface {
	Name() string
	Keep(req *Request, n *NodeState, now time.Time) bool
}

// LiveFilter keeps nodes the peer table holds alive.
type LiveFilter struct{}

// Name implements Filter.
func (LiveFilter) Name() string { return "live" }

// Keep implements Filter.
func (LiveFilter) Keep(_ *Request, n *NodeState, _ time.Time) bool { return n.Health == Alive }

// PhaseFilter drops draining nodes (their sessions are moving away) and
// joining ones (they have not loaded their range).
type PhaseFilter struct{}

// Name implements Filter.
func (PhaseFilter) Name() string { return "phase" }

// Keep implements Filter.
func (PhaseFilter) Keep(_ *Request, n *NodeState, _ time.Time) bool {
	return n.Phase == Serving || n.Phase == Warming
}

// KVFilter drops nodes that reported less free KV cache than the session
// needs. It is not a default filter: by default such nodes are charged the
// config's KVPenalty instead, since their cache frees up as sessions end
// and refusing them could leave a layer with no holder at all.
type KVFilter struct{}

// Name implements Filter.
func (KVFilter) Name() string { return "kv" }

// Keep implements Filter.
func (KVFilter) Keep(req *Request, n *NodeState, _ time.Time) bool {
	return n.FreeKV < 0 || n.FreeKV >= req.Tokens()
}

// DefaultFilters are the filters a Router runs unless WithFilters says
// otherwise: liveness and phase.
func DefaultFilters() []Filter { return []Filter{LiveFilter{}, PhaseFilter{}} }

// Estimate is what the router works out about one node for one request
// before the scorers run. Times are seconds of the request's whole life:
// its prefill plus one decode step per output token.
type Estimate struct {
	Node     *NodeState // read only
	Range    layers.Range
	Hardware layers.Hardware // the device the estimates assumed
	Measured bool            // the node's measured layer latency calibrated them
	Stale    bool            // the load figures are older than Config.StaleAfter

	Steps    int // passes through the path: one per output token
	Batch    int // sessions the node will run with this one: active + queued + 1
	MaxBatch int // the node's batch slots; beyond them sessions take turns
	KVShort  bool

	// Cached is the prompt positions the node's prefix cache is expected
	// to hold (Request.Prefix against NodeState.Prefixes): its prefill
	// computes only the rest.
	Cached int
	// LayerTime is one layer's work for this request at the node's current
	// batch; LoadedTime the same with the queue ahead of it served too.
	LayerTime, LoadedTime float64
	// HeadTime is the output head's work, paid by the path's last hop.
	HeadTime float64
	// LinkTime is what one crossing into or out of this node costs on its
	// side: activations through its link, relay charges and half the
	// per-hop overhead.
	LinkTime float64
}

// NodeCost is one node's share of a path's cost in seconds, split the way
// the DP adds it up. Negative or non-finite parts are clamped to zero and
// infinity, which drops the node.
type NodeCost struct {
	Layer float64 // per layer the path runs on the node
	Visit float64 // once per hop on the node
	Link  float64 // once per crossing between this node and another
	Last  float64 // once, if the path ends on the node
}

// Scorer turns an estimate into costs. Scorers' costs are summed, each
// times its weight, so that a new policy plugs in without touching the DP.
type Scorer interface {
	Name() string
	Score(req *Request, e *Estimate) NodeCost
}

// LatencyScorer charges the compute at the node's current batch.
type LatencyScorer struct{}

// Name implements Scorer.
func (LatencyScorer) Name() string { return "latency" }

// Score implements Scorer.
func (LatencyScorer) Score(_ *Request, e *Estimate) NodeCost {
	return NodeCost{Layer: e.LayerTime, Last: e.HeadTime}
}

// LoadScorer charges the extra time the queue ahead costs, and a penalty
// per pass when the node's free KV cache cannot hold the session.
type LoadScorer struct {
	KVPenalty float64 // seconds per pass
}

// Name implements Scorer.
func (LoadScorer) Name() string { return "load" }

// Score implements Scorer.
func (s LoadScorer) Score(_ *Request, e *Estimate) NodeCost {
	c := NodeCost{Layer: max(e.LoadedTime-e.LayerTime, 0)}
	if e.KVShort {
		c.Visit = s.KVPenalty * float64(e.Steps)
	}
	return c
}

// LocalityScorer charges each crossing's per-node side. The round trips
// between nodes, which depend on the pair, are the DP's own, under the
// same weight.
type LocalityScorer struct{}

// Name implements Scorer.
func (LocalityScorer) Name() string { return "locality" }

// Score implements Scorer.
func (LocalityScorer) Score(_ *Request, e *Estimate) NodeCost { return NodeCost{Link: e.LinkTime} }
