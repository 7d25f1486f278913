package routing

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/stratanet/strata/layers"
)

// Hop is one node's share of a path: it runs layers [From, To). A hop may
// start and end anywhere inside the node's range (a turning point), so
// overlapping ranges are usable without trimming them.
type Hop struct {
	Node     string
	From, To int
}

// Range is the hop's layers as a layers.Range.
func (h Hop) Range() layers.Range { return layers.Range{Start: h.From, End: h.To} }

func (h Hop) String() string { return fmt.Sprintf("%s[%d,%d)", h.Node, h.From, h.To) }

// Breakdown splits a path's cost, in seconds of the request's time (times
// the policy's weights), by what it pays for.
type Breakdown struct {
	Latency  float64 // compute at the nodes' current batches, output head included
	Load     float64 // queueing, full KV caches and the surcharge on stale figures
	Locality float64 // round trips, activation transfers, relays, hop overheads
	Other    float64 // scorers added with WithScorer
	// Scores are the same path rated in [0, 1] per scorer, for people;
	// they are reported alongside the costs and steer nothing.
	Scores Scores
}

// Scores rate a path in [0, 1], 1 best, on each built-in scorer's terms,
// as the Gateway API Inference Extension's scorers do: what a dashboard
// can compare across models and swarms, where the costs are seconds.
// Per-hop scores are averaged over the layers each hop runs. They are
// computed for every path, whether or not its profile weights the scorer.
type Scores struct {
	// Latency: the fastest eligible node's layer time for the request over
	// each hop's (1: every hop is as fast as the fastest node).
	Latency float64 `json:"latency"`
	// Load: each hop's compute over its compute plus the queue ahead of
	// it, 0 on a hop whose free KV cache cannot hold the session.
	Load float64 `json:"load"`
	// Locality: the path's compute over its compute plus its network time
	// (round trips, transfers, relays, hop overheads); 1 when the profile
	// does not weigh locality, as its network time is then unknown.
	Locality float64 `json:"locality"`
	// Stale: the share of layers on nodes whose figures are fresh.
	Stale float64 `json:"stale"`
	// KVHeadroom and PrefixAffinity are those scorers' own unit scores
	// (KVHeadroomScorer, PrefixAffinityScorer with its default damping).
	KVHeadroom     float64 `json:"kv_headroom"`
	PrefixAffinity float64 `json:"prefix_affinity"`
}

// Path is the chain of hops a request takes; the hops cover [0, L) exactly,
// in order.
type Path struct {
	Hops  []Hop
	Epoch uint64 // the epoch of the map it was routed on
	// Cost is the path's score: the estimated time of the whole request in
	// seconds, each term times its weight. Lower is better.
	Cost  float64
	Terms Breakdown
}

// Validate checks that the hops chain exactly over [0, layers): the first
// starts at 0, each starts where the previous ended, the last ends at
// layers, none is empty, and consecutive hops are on different nodes.
func (p Path) Validate(layers int) error {
	if len(p.Hops) == 0 {
		return fmt.Errorf("%w: no hops", ErrBadPath)
	}
	at := 0
	for i, h := range p.Hops {
		switch {
		case h.Node == "":
			return fmt.Errorf("%w: hop %d has no node", ErrBadPath, i)
		case h.From != at:
			return fmt.Errorf("%w: hop %d (%v) starts at %d, want %d", ErrBadPath, i, h, h.From, at)
		case h.To <= h.From:
			return fmt.Errorf("%w: hop %d (%v) is empty", ErrBadPath, i, h)
		case i > 0 && p.Hops[i-1].Node == h.Node:
			return fmt.Errorf("%w: hop %d (%v) repeats the node before it", ErrBadPath, i, h)
		}
		at = h.To
	}
	if at != layers {
		return fmt.Errorf("%w: ends at %d, want %d", ErrBadPath, at, layers)
	}
	return nil
}

// Nodes lists the path's nodes in hop order.
func (p Path) Nodes() []string {
	out := make([]string, len(p.Hops))
	for i, h := range p.Hops {
		out[i] = h.Node
	}
	return out
}

// Uses reports whether the path visits node.
func (p Path) Uses(node string) bool {
	for _, h := range p.Hops {
		if h.Node == node {
			return true
		}
	}
	return false
}

// Same reports whether two paths have the same hops.
func (p Path) Same(o Path) bool {
	if len(p.Hops) != len(o.Hops) {
		return false
	}
	for i := range p.Hops {
		if p.Hops[i] != o.Hops[i] {
			return false
		}
	}
	return true
}

func (p Path) String() string {
	parts := make([]string, len(p.Hops))
	for i, h := range p.Hops {
		parts[i] = h.String()
	}
	return strings.Join(parts, " → ")
}

// PickWithin chooses one of paths at random (from seed) among those whose
// cost is within slack of the cheapest (cost ≤ (1+slack)·best), with
// probability proportional to 1/cost, so that cheaper paths are favoured but
// nearly-as-good ones still get traffic. It returns false for no paths.
func PickWithin(paths []Path, slack float64, seed uint64) (Path, bool) {
	if len(paths) == 0 {
		return Path{}, false
	}
	if !(slack >= 0) || math.IsInf(slack, 0) {
		slack = 0
	}
	best := math.Inf(1)
	for _, p := range paths {
		if p.Cost < best {
			best = p.Cost
		}
	}
	if math.IsInf(best, 1) || math.IsNaN(best) {
		return paths[0], true
	}
	limit := best + slack*math.Abs(best)
	weight := func(p Path) float64 {
		if !(p.Cost <= limit) {
			return 0
		}
		return 1 / math.Max(p.Cost, 1e-12)
	}
	sum := 0.0
	for _, p := range paths {
		sum += weight(p)
	}
	x := unit(rand.NewPCG(seed, pickStream)) * sum
	for _, p := range paths {
		w := weight(p)
		if w > 0 && x < w {
			return p, true
		}
		x -= w
	}
	// Rounding left x past the end: the last eligible path takes it.
	for i := len(paths) - 1; i >= 0; i-- {
		if weight(paths[i]) > 0 {
			return paths[i], true
		}
	}
	return paths[0], true
}

// unit draws a float64 in [0, 1) from the top 53 bits of one PCG output,
// without the allocation of a rand.Rand.
func unit(p *rand.PCG) float64 { return float64(p.Uint64()>>11) / (1 << 53) }

// Stream constants of the PCG draws, so that the draws for different
// purposes under one request seed are unrelated.
const (
	pickStream    = 0x9e3779b97f4a7c15
	perturbStream = 0xbf58476d1ce4e5b9
)
