package layers

import (
	"fmt"
	"math"
	"sort"
)

// Fleet is a node set with its throughput profiles for one model: the input
// that every planner and every quality measure takes. It is immutable.
type Fleet struct {
	Model    ModelSpec
	Params   CostParams
	Profiles []Profile // sorted by node ID
	index    map[string]int
}

// NewFleet profiles nodes for model m. The order of nodes does not matter.
func NewFleet(m ModelSpec, nodes []Node, p CostParams) (*Fleet, error) {
	p = p.withDefaults()
	sorted := append([]Node(nil), nodes...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].ID < sorted[j].ID })
	prof, err := Profiles(m, sorted, p)
	if err != nil {
		return nil, err
	}
	f := &Fleet{Model: m, Params: p, Profiles: prof, index: make(map[string]int, len(prof))}
	for i, pr := range prof {
		f.index[pr.Node.ID] = i
	}
	return f, nil
}

// Subset is the fleet of the given members, reusing their profiles: a
// caller that re-plans a changing membership (a simulator, a leader) pays
// for profiling once. An id not in f is an error.
func (f *Fleet) Subset(ids []string) (*Fleet, error) {
	idx := make([]int, 0, len(ids))
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		i, ok := f.index[id]
		if !ok {
			return nil, fmt.Errorf("%w: node %q is not in the fleet", ErrBadSpec, id)
		}
		if seen[id] {
			return nil, fmt.Errorf("%w: duplicate node id %q", ErrBadSpec, id)
		}
		seen[id] = true
		idx = append(idx, i)
	}
	sort.Ints(idx) // Profiles stay sorted by ID
	out := &Fleet{Model: f.Model, Params: f.Params, Profiles: make([]Profile, len(idx)), index: make(map[string]int, len(idx))}
	for k, i := range idx {
		out.Profiles[k] = f.Profiles[i]
		out.index[f.Profiles[i].Node.ID] = k
	}
	return out, nil
}

// Len is the number of nodes.
func (f *Fleet) Len() int { return len(f.Profiles) }

// Profile returns a node's profile.
func (f *Fleet) Profile(id string) (Profile, bool) {
	i, ok := f.index[id]
	if !ok {
		return Profile{}, false
	}
	return f.Profiles[i], true
}

// Index returns a node's position in Profiles, or -1.
func (f *Fleet) Index(id string) int {
	if i, ok := f.index[id]; ok {
		return i
	}
	return -1
}

// StageTPS is the tokens/s a stage's node gives when it serves that range,
// ends included. Nodes outside the fleet give nothing.
func (f *Fleet) StageTPS(s Stage) float64 {
	p, ok := f.Profile(s.Node)
	if !ok {
		return 0
	}
	return p.TPS(s.Len(), EndsOf(s.Range, f.Model.Layers))
}

// LayerFlow returns, for every layer, the summed tokens/s of the nodes that
// serve it.
func (f *Fleet) LayerFlow(m LayerMap) []float64 {
	L := f.Model.Layers
	diff := make([]float64, L+1)
	for _, s := range m.Stages {
		if s.Start < 0 || s.End > L || s.Start >= s.End {
			continue
		}
		t := f.StageTPS(s)
		diff[s.Start] += t
		diff[s.End] -= t
	}
	out := make([]float64, L)
	run := 0.0
	for l := range out {
		run += diff[l]
		out[l] = math.Max(run, 0)
	}
	return out
}

// Flow is the swarm throughput of map m in tokens/s. A token that visits a
// node costs 1/TPS of that node's time however many of its layers it uses,
// and paths may enter and leave a node anywhere inside its range, so by
// Menger's theorem the max flow from layer 0 to layer L is the least summed
// capacity over the layers.
func (f *Fleet) Flow(m LayerMap) float64 {
	if m.Layers != f.Model.Layers {
		return 0
	}
	lf := f.LayerFlow(m)
	if len(lf) == 0 {
		return 0
	}
	lo := lf[0]
	for _, v := range lf {
		lo = math.Min(lo, v)
	}
	return lo
}

// UB is an upper bound on Flow for any map of this fleet: each node at its
// most efficient layer count, with contiguity and coverage ignored.
func (f *Fleet) UB() float64 {
	sum := 0.0
	for _, p := range f.Profiles {
		best := 0.0
		for k := 1; k <= p.MaxLayers; k++ {
			best = math.Max(best, float64(k)*p.TPS(k, 0))
		}
		sum += best
	}
	return sum / float64(f.Model.Layers)
}

// UB2 is the coverage-aware bound: the largest F for which the nodes can
// supply L·F layer-tokens/s when no node counts for more than F on a layer
// (a layer needs F in total, and one node on it gives at most its TPS).
// The supply over F only falls as F grows, so bisection finds the edge.
func (f *Fleet) UB2() float64 {
	L := float64(f.Model.Layers)
	supply := func(F float64) float64 {
		sum := 0.0
		for _, p := range f.Profiles {
			best := 0.0
			for k := 1; k <= p.MaxLayers; k++ {
				best = math.Max(best, float64(k)*math.Min(p.TPS(k, 0), F))
			}
			sum += best
		}
		return sum
	}
	lo, hi := 0.0, f.UB()
	if hi <= 0 {
		return 0
	}
	if supply(hi) >= L*hi {
		return hi
	}
	for range 64 {
		mid := (lo + hi) / 2
		if supply(mid) >= L*mid {
			lo = mid
		} else {
			hi = mid
		}
		if hi-lo <= 1e-9*hi {
			break
		}
	}
	return lo
}

// RTT gives the round-trip time in seconds between two nodes. A nil RTT
// means links cost nothing.
type RTT func(a, b string) float64

// PathLatency is the per-token latency of the best path through m at
// batch 1: each hop's layer time plus half the RTT and the activation
// transfer to the next hop, plus the output head on the last hop. Paths may
// change node at any layer inside a range. +Inf when m has a gap.
func (f *Fleet) PathLatency(m LayerMap, rtt RTT) float64 {
	L := f.Model.Layers
	if m.Layers != L || L == 0 {
		return math.Inf(1)
	}
	type hop struct {
		id        string
		r         Range
		perLayer  float64
		transfer  float64
		headDelay float64
	}
	var hops []hop
	for _, s := range m.Stages {
		p, ok := f.Profile(s.Node)
		if !ok || s.Start < 0 || s.End > L || s.Start >= s.End {
			continue
		}
		speed := p.Node.Speed
		if !(speed > 0) {
			speed = 1
		}
		h := hop{id: s.Node, r: s.Range}
		h.perLayer = DecodeLayerTime(f.Model, p.Node.Hardware, 1, f.Params.Context) / speed
		if nb := p.Node.Hardware.NetBandwidth; nb > 0 {
			h.transfer = f.Model.ActivationBytesPerToken() / nb
		}
		h.headDelay = headTime(f.Model, p.Node.Hardware, 1) / speed
		hops = append(hops, h)
	}
	inf := math.Inf(1)
	cur := make([]float64, len(hops)) // best latency with layers [0,l) done, ending on hop i
	for i := range cur {
		cur[i] = inf
	}
	next := make([]float64, len(hops))
	for l := 0; l < L; l++ {
		for i, h := range hops {
			next[i] = inf
			if !h.r.Contains(l) {
				continue
			}
			best := cur[i] // stay on the same node
			if l == 0 {
				best = 0
			} else {
				for j, g := range hops {
					if j == i || math.IsInf(cur[j], 1) {
						continue
					}
					c := cur[j] + g.transfer
					if rtt != nil {
						c += rtt(g.id, h.id) / 2
					}
					best = math.Min(best, c)
				}
			}
			next[i] = best + h.perLayer
		}
		cur, next = next, cur
	}
	best := inf
	for i, h := range hops {
		best = math.Min(best, cur[i]+h.headDelay)
	}
	return best
}
