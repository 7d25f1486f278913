package layers

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// ErrNoCoverage reports that the nodes' capacity cannot cover every layer.
// Planners that return it still return their best partial map.
var ErrNoCoverage = errors.New("layers: capacity cannot cover every layer")

// Planner is Strata's placement policy. It is a value: safe to copy and to
// use from many goroutines, since every call works on its own state.
type Planner struct {
	replication   int
	replBudget    float64
	stageSlack    float64
	rtt           RTT
	latencyTarget float64
	seeds         []LayerMap
	exactBudget   int
	searchPasses  int
	workBudget    int
}

// Option configures a Planner.
type Option func(*Planner)

// WithReplication sets the replication floor: every layer on at least n
// nodes whenever capacity allows (default 2, so one death never breaks
// coverage). The planner lowers it when the nodes cannot meet it, or when
// meeting it costs more than the replication budget.
func WithReplication(n int) Option { return func(p *Planner) { p.replication = max(n, 1) } }

// WithReplicationBudget sets how much flow the replication floor may cost
// (default 0.10): where holding it would cost more, or would leave less
// flow than a seed map, the floor drops to 1 and Plan.Note says so.
func WithReplicationBudget(x float64) Option {
	return func(p *Planner) {
		if x >= 0 && x <= 1 {
			p.replBudget = x
		}
	}
}

// WithStageSlack lets a node take more layers (fewer stages per path) when
// that costs at most this fraction of what the best choice gives (default
// 0.01).
func WithStageSlack(x float64) Option {
	return func(p *Planner) {
		if x >= 0 && x < 1 {
			p.stageSlack = x
		}
	}
}

// WithRTT gives the planner round-trip times, so that it orders stages to
// keep paths inside regions and reports latency.
func WithRTT(r RTT) Option { return func(p *Planner) { p.rtt = r } }

// WithLatencyTarget asks for a best path of at most this many seconds per
// token; the planner gives up throughput for fewer stages to meet it.
func WithLatencyTarget(sec float64) Option {
	return func(p *Planner) {
		if sec > 0 && !math.IsInf(sec, 0) {
			p.latencyTarget = sec
		}
	}
}

// WithSeeds adds maps to start the search from as well as our own, such as
// the committed map or another policy's plan.
func WithSeeds(ms ...LayerMap) Option {
	return func(p *Planner) { p.seeds = append(p.seeds, ms...) }
}

// WithExactBudget bounds the branch-and-bound search used on small
// instances, in search nodes (default 2,000,000; 0 turns it off).
func WithExactBudget(n int) Option { return func(p *Planner) { p.exactBudget = max(n, 0) } }

// NewPlanner returns a planner with the given options.
func NewPlanner(opts ...Option) Planner {
	p := Planner{replication: 2, replBudget: 0.10, stageSlack: 0.01, exactBudget: 2_000_000, searchPasses: 8,
		workBudget: 60_000_000}
	for _, o := range opts {
		o(&p)
	}
	return p
}

// Plan is a planner's answer.
type Plan struct {
	Map  LayerMap
	Flow float64
	// Replication is the floor the plan meets: the requested one, or less
	// where capacity did not allow it.
	Replication int
	// Exact is true when a complete search proved Map optimal for Flow.
	Exact bool
	// Note says why the plan departs from what was asked, if it does.
	Note string
}

// Full plans a map for the whole fleet from scratch (and from any seeds).
// Same fleet in any order, same options: same map.
func (pl Planner) Full(f *Fleet, epoch uint64) (Plan, error) {
	if f == nil || f.Len() == 0 {
		return Plan{Map: LayerMap{Epoch: epoch, Layers: layersOf(f)}}, fmt.Errorf("%w: no nodes", ErrNoCoverage)
	}
	best, err := pl.search(f, pl.replication, 0)
	note := ""
	if err == nil && pl.replication > 1 {
		// The floor yields where holding it costs more than the budget, or
		// would leave less flow than a map we were seeded with.
		seedFlow := 0.0
		for _, s := range pl.seeds {
			seedFlow = math.Max(seedFlow, f.Flow(s))
		}
		flowR := best.minFlow()
		if flowR < (1-pl.replBudget)*f.UB2() || flowR < seedFlow*(1-eps) {
			if one, err1 := pl.search(f, 1, 0); err1 == nil {
				if flowR < (1-pl.replBudget)*one.minFlow() || flowR < seedFlow*(1-eps) {
					note = fmt.Sprintf("replication %d would cost %.0f%% of flow: floor lowered to %d",
						max(best.minCount(), 1), 100*(1-flowR/one.minFlow()), max(one.minCount(), 1))
					best = one
				}
			}
		}
	}
	if err == nil && pl.latencyTarget > 0 && f.PathLatency(best.layerMap(epoch), pl.rtt) > pl.latencyTarget {
		// Fewer, longer stages: raise the smallest stage until the target holds.
		for minK := 2; minK <= f.Model.Layers; minK *= 2 {
			cand, cerr := pl.search(f, min(pl.replication, best.minCount()), minK)
			if cerr != nil {
				break
			}
			if f.PathLatency(cand.layerMap(epoch), pl.rtt) <= pl.latencyTarget {
				best = cand
				break
			}
		}
	}
	if pl.rtt != nil {
		alignRegions(best.placement)
	}
	m := best.layerMap(epoch)
	out := Plan{Map: m, Flow: f.Flow(m), Replication: m.Replication(), Exact: best.exact, Note: note}
	if !m.Covers() {
		return out, fmt.Errorf("%w: %d gap(s), first %v", ErrNoCoverage, len(m.Gaps()), m.Gaps()[0])
	}
	return out, nil
}

type searchResult struct {
	*placement
	exact bool
}

func layersOf(f *Fleet) int {
	if f == nil {
		return 0
	}
	return f.Model.Layers
}

// search runs the whole pipeline: target-driven construction, seeds, local
// search, and the exact search on small instances. It returns the best
// placement found that meets the highest replication floor achievable.
func (pl Planner) search(f *Fleet, R, minLayers int) (searchResult, error) {
	L := f.Model.Layers
	order := pl.order(f)
	sc := &insertScratch{}
	// The highest floor the nodes can meet, found by construction at flow 0.
	probe := newPlacement(f)
	for ; R > 1; R-- {
		pl.construct(probe, order, insertGoal{R: R, minLayers: minLayers}, sc)
		if probe.minCount() >= R {
			break
		}
	}
	best := newPlacement(f)
	have := false
	// consider keeps p if it meets the floor where best does not, or has
	// more flow at the same standing.
	consider := func(p *placement) {
		okP, okB := p.minCount() >= R, best.minCount() >= R
		if !have || (okP && !okB) || (okP == okB && p.minFlow() > best.minFlow()*(1+eps)) {
			best.copyFrom(p)
			have = true
		}
	}

	// Bisection on the flow target: each step builds a placement that tries
	// to lift every layer to F.
	cur := newPlacement(f)
	// It runs twice: with plain gains, and with gains quantized to row
	// shares, which finds whole-row tilings the plain one misses.
	for _, quantize := range []bool{false, true} {
		lo, hi := 0.0, f.UB2()*(1+1e-6)
		for it := 0; it < 16 && hi > 0 && (hi-lo) > 5e-3*hi; it++ {
			F := (lo + hi) / 2
			pl.construct(cur, order, insertGoal{T: F, R: R, minLayers: minLayers, quantize: quantize}, sc)
			consider(cur)
			if cur.minFlow() >= F*(1-1e-9) && cur.minCount() >= R {
				lo = math.Max(F, cur.minFlow())
			} else {
				hi = F
			}
		}
	}
	// Feasibility is not monotone in the target (a higher one can steer
	// nodes into a tiling a lower one misses), so also try a few targets
	// above the best found.
	found := best.minFlow()
	for _, up := range []float64{1.005, 1.01, 1.02, 1.035, 1.05, 1.08} {
		for _, quantize := range []bool{false, true} {
			pl.construct(cur, order, insertGoal{T: found * up, R: R, minLayers: minLayers, quantize: quantize}, sc)
			consider(cur)
		}
	}
	pl.improve(best, R, minLayers, sc)

	for _, s := range pl.seeds {
		if s.Layers == L {
			pl.refine(cur, s, order, R, minLayers, sc)
			consider(cur)
		}
	}

	res := searchResult{placement: best}
	if pl.exactBudget > 0 && minLayers == 0 && small(f) {
		if ex, ok := exactSearch(f, R, best.minFlow(), pl.exactBudget); ok {
			res.exact = true
			if ex != nil && ex.minFlow() > best.minFlow()*(1+eps) {
				res.placement = ex
			}
		}
	}
	if L > 0 && res.minCount() == 0 {
		return res, ErrNoCoverage
	}
	return res, nil
}

// refine starts from map s: nodes of the fleet that s leaves out join where
// they add the most, then local search improves the whole.
func (pl Planner) refine(p *placement, s LayerMap, order []int, R, minLayers int, sc *insertScratch) {
	p.load(s)
	for _, i := range order {
		if p.rng[i].Empty() {
			g := insertGoal{T: p.minFlow() * 1.05, R: R, minFirst: true, slack: pl.stageSlack, minLayers: minLayers}
			if r, ok := p.bestInsert(i, g, sc); ok {
				p.add(i, r)
			}
		}
	}
	pl.improve(p, R, minLayers, sc)
}

// construct places every node in order, each where it best lifts the layers
// still short of the goal's flow and replication.
func (pl Planner) construct(p *placement, order []int, g insertGoal, sc *insertScratch) {
	p.reset()
	g.slack = pl.stageSlack
	for _, i := range order {
		if r, ok := p.bestInsert(i, g, sc); ok {
			p.add(i, r)
		}
	}
}

// order is the order construction places nodes in: grouped by region (so
// that consecutive stages, which become path neighbours, share a region),
// biggest contributors first, ties by ID.
func (pl Planner) order(f *Fleet) []int {
	N := f.Len()
	weight := make([]float64, N)
	regionW := map[string]float64{}
	for i, pr := range f.Profiles {
		bk := pr.BestK()
		weight[i] = float64(bk) * pr.TPS(bk, 0)
		regionW[pr.Node.Region] += weight[i]
	}
	idx := make([]int, N)
	for i := range idx {
		idx[i] = i
	}
	useRegion := pl.rtt != nil
	sort.SliceStable(idx, func(a, b int) bool {
		i, j := idx[a], idx[b]
		ri, rj := f.Profiles[i].Node.Region, f.Profiles[j].Node.Region
		if useRegion && ri != rj {
			if regionW[ri] != regionW[rj] {
				return regionW[ri] > regionW[rj]
			}
			return ri < rj
		}
		if weight[i] != weight[j] {
			return weight[i] > weight[j]
		}
		return i < j
	})
	return idx
}

func small(f *Fleet) bool { return f.Len() <= 6 && f.Model.Layers <= 16 }
