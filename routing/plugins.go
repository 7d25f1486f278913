package routing

import (
	"math"
	"slices"
)

// UnitScorer scores a node for a request in [0, 1], 1 best, the way the
// Gateway API Inference Extension's scorers do. AsScorer turns it into a
// cost the DP can add up: a node scoring s is charged (1−s) times its own
// loaded compute time, so a weight w makes a node scoring 0 look up to
// (1+w) times slower than one scoring 1, whatever the model's scale.
type UnitScorer interface {
	Name() string
	Unit(req *Request, e *Estimate) float64
}

// AsScorer adapts a UnitScorer to the Scorer the router sums. Scores
// outside [0, 1] are clamped; NaN counts as 0.
func AsScorer(u UnitScorer) Scorer { return unitScorer{u} }

type unitScorer struct{ u UnitScorer }

func (s unitScorer) Name() string { return s.u.Name() }

func (s unitScorer) Score(req *Request, e *Estimate) NodeCost {
	x := s.u.Unit(req, e)
	if !(x >= 0) {
		x = 0
	}
	miss := 1 - min(x, 1)
	return NodeCost{Layer: miss * e.LoadedTime, Last: miss * e.HeadTime}
}

// KVHeadroomScorer prefers nodes with free KV cache to spare after the
// session: 1 − need/free, 0 when the session does not fit. A node that did
// not report its cache scores 1: a missing figure means "keep serving".
type KVHeadroomScorer struct{}

// Name implements UnitScorer.
func (KVHeadroomScorer) Name() string { return "kv-headroom" }

// Unit implements UnitScorer.
func (KVHeadroomScorer) Unit(req *Request, e *Estimate) float64 {
	free := e.Node.FreeKV
	if free < 0 {
		return 1
	}
	if free == 0 {
		return 0
	}
	return min(max(1-float64(req.Tokens())/float64(free), 0), 1)
}

// DefaultHalfLoad is PrefixAffinityScorer's default HalfLoad.
const DefaultHalfLoad = 4

// PrefixAffinityScorer prefers nodes whose prefix cache holds the longest
// part of the request's prefix (Request.Prefix against
// NodeState.Prefixes): the fraction of the request's blocks matched from
// the start. The affinity is damped by the node's queue, halved once
// HalfLoad requests wait there, so that one hot prefix cannot herd every
// request onto the path that first cached it: past a few queued requests
// a cold path wins and caches the prefix too. A request without a prefix
// scores 1 everywhere (no preference).
type PrefixAffinityScorer struct {
	HalfLoad int // 0: DefaultHalfLoad
}

// Name implements UnitScorer.
func (PrefixAffinityScorer) Name() string { return "prefix-affinity" }

// Unit implements UnitScorer.
func (p PrefixAffinityScorer) Unit(req *Request, e *Estimate) float64 {
	if len(req.Prefix) == 0 {
		return 1
	}
	matched := e.Node.Prefixes.Match(req.Prefix)
	if matched == 0 {
		return 0
	}
	h := p.HalfLoad
	if h <= 0 {
		h = DefaultHalfLoad
	}
	q := min(max(e.Node.QueueDepth, 0), maxCount)
	return float64(matched) / float64(len(req.Prefix)) * float64(h) / float64(h+q)
}

// The plugins a scheduling profile may name. Filters map to Filter values;
// scorers to how a profile's router is built (see scorerPlugins).
var filterPlugins = map[string]func() Filter{
	"live":  func() Filter { return LiveFilter{} },
	"phase": func() Filter { return PhaseFilter{} },
	"kv":    func() Filter { return KVFilter{} },
}

// profileBuild collects what a profile's scorers set on its router.
type profileBuild struct {
	w     Weights
	stale float64
	extra []weighted
}

var scorerPlugins = map[string]func(b *profileBuild, w float64){
	// The router's own time estimates, in seconds.
	"latency":  func(b *profileBuild, w float64) { b.w.Latency = w },
	"load":     func(b *profileBuild, w float64) { b.w.Load = w },
	"locality": func(b *profileBuild, w float64) { b.w.Locality = w },
	// A stale node scores 0, a fresh one 1; the weight is the fraction of
	// its whole cost a stale node is charged extra (Config.StalePenalty).
	// Stale figures still route: a gossip hiccup must not refuse requests.
	"stale": func(b *profileBuild, w float64) { b.stale = w },
	"kv-headroom": func(b *profileBuild, w float64) {
		b.extra = append(b.extra, weighted{s: AsScorer(KVHeadroomScorer{}), w: w, kind: kindOther})
	},
	"prefix-affinity": func(b *profileBuild, w float64) {
		b.extra = append(b.extra, weighted{s: AsScorer(PrefixAffinityScorer{}), w: w, kind: kindOther})
	},
}

// FilterPlugins lists the filter names a profile may use, sorted.
func FilterPlugins() []string { return sortedKeys(filterPlugins) }

// ScorerPlugins lists the scorer names a profile may use, sorted.
func ScorerPlugins() []string { return sortedKeys(scorerPlugins) }

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// finiteWeight reports whether w is usable as a scorer weight.
func finiteWeight(w float64) bool { return w > 0 && !math.IsInf(w, 0) && w <= maxSeconds }

// unitSums adds up a path's per-hop unit scores (Scores), weighted by
// the layers each hop runs.
type unitSums struct {
	layers, latency, load, fresh, kv, prefix float64
	compute                                  float64 // seconds, unweighted
}

// ratio is a/b in [0, 1]: 1 when b is not positive (nothing to compare).
func ratio(a, b float64) float64 {
	if !(b > 0) {
		return 1
	}
	x := a / b
	if !(x >= 0) {
		return 0
	}
	return min(x, 1)
}

func (u *unitSums) add(req *Request, e *Estimate, n, minLayer float64, last bool) {
	u.layers += n
	u.latency += n * ratio(minLayer, e.LayerTime)
	if !e.KVShort {
		u.load += n * ratio(e.LayerTime, e.LoadedTime)
	}
	if !e.Stale {
		u.fresh += n
	}
	u.kv += n * KVHeadroomScorer{}.Unit(req, e)
	u.prefix += n * PrefixAffinityScorer{}.Unit(req, e)
	u.compute += n * e.LayerTime
	if last {
		u.compute += e.HeadTime
	}
}

// scores averages the sums; locality is the path's weighted locality cost
// and w its weight, from which its network seconds are recovered.
func (u *unitSums) scores(locality, w float64) Scores {
	if !(u.layers > 0) {
		return Scores{}
	}
	clamp := func(x float64) float64 { return min(max(x/u.layers, 0), 1) }
	s := Scores{Latency: clamp(u.latency), Load: clamp(u.load), Stale: clamp(u.fresh),
		KVHeadroom: clamp(u.kv), PrefixAffinity: clamp(u.prefix), Locality: 1}
	if w > 0 {
		s.Locality = ratio(u.compute, u.compute+locality/w)
	}
	return s
}
