package layers

import (
	"errors"
	"fmt"
	"sort"
)

// ErrNoSafeOrder reports moves that cannot be ordered so that every layer
// stays served at every step.
var ErrNoSafeOrder = errors.New("layers: no order of moves keeps every layer served")

// RebalanceOptions set the hysteresis and the price of moving.
type RebalanceOptions struct {
	// MinGain is the relative flow gain, net of migration cost, below
	// which the swarm stays as it is (default 0.10).
	MinGain float64
	// CostPerModel is the gain a migration must pay for loading the
	// equivalent of the whole model's weights once (default 0.05): moving
	// half the model's bytes costs 2.5% of flow gain.
	CostPerModel float64
	// FetchRates holds, for each node that has no model file and fetches
	// the weights it loads from peers, the rate it fetches at (bytes/s,
	// measured by the node). A node absent here loads from its own file.
	FetchRates map[string]float64
	// CostPerFetchMinute is the gain a migration must pay for each minute
	// its slowest fetch takes (LoadBytes ÷ the node's fetch rate; moves
	// fetch in parallel), since the moved layers serve only after it
	// (default 0.02).
	CostPerFetchMinute float64
}

func (o RebalanceOptions) withDefaults() RebalanceOptions {
	if o.MinGain <= 0 {
		o.MinGain = 0.10
	}
	if o.CostPerModel <= 0 {
		o.CostPerModel = 0.05
	}
	if o.CostPerFetchMinute <= 0 {
		o.CostPerFetchMinute = 0.02
	}
	return o
}

// Rebalance is a rebalance decision.
type Rebalance struct {
	Move     bool     // false: stay on the committed map
	Reason   string   // why, in words
	From, To LayerMap // To has epoch From.Epoch+1 when Move
	FlowFrom float64  // flow of the committed map under measured speeds
	FlowTo   float64  // flow of the target map
	Bytes    float64  // weight bytes all moves load
	// FetchSeconds is the longest fetch of a move's bytes from peers by a
	// node without the file (0: every moving node has the file).
	FetchSeconds float64
	Steps        [][]Move // moves in order; the moves of one step run together
}

// Rebalance decides whether to leave the committed map for a better one,
// given measured speeds (in the fleet's Node.Speed). The target comes from
// our search started at the committed map, so that it keeps what already
// works; the gain must beat MinGain after paying for the bytes moved. Steps
// are ordered make-before-break: see OrderMoves.
func (pl Planner) Rebalance(f *Fleet, committed LayerMap, o RebalanceOptions) (Rebalance, error) {
	o = o.withDefaults()
	res := Rebalance{From: committed, To: committed, FlowFrom: f.Flow(committed)}
	if committed.Layers != f.Model.Layers {
		return res, fmt.Errorf("%w: map has %d layers, model %d", ErrBadMap, committed.Layers, f.Model.Layers)
	}
	// No map of these nodes has more flow than UB2: when even that would
	// not gain MinGain, no search can find a move that pays (the leader
	// asks after every repair, so this spares a full search per leave).
	if ub := f.UB2(); res.FlowFrom > 0 && ub*(1+1e-9) < res.FlowFrom*(1+o.MinGain) {
		res.Reason = fmt.Sprintf("no map can gain %.0f%%: the bound is %.1f%% above the committed flow",
			100*o.MinGain, 100*(ub/res.FlowFrom-1))
		return res, nil
	}
	// Two candidates: the best map from a full search (seeded with the
	// committed one), and the committed map improved in place, which moves
	// less. The one with the larger gain net of migration cost wins.
	full := pl
	full.seeds = append([]LayerMap{committed}, pl.seeds...)
	plan, err := full.Full(f, committed.Epoch+1)
	if err != nil {
		res.Reason = fmt.Sprintf("no better map: %v", err)
		return res, nil
	}
	local := newPlacement(f)
	R := max(1, min(pl.replication, plan.Replication))
	pl.refine(local, committed, pl.order(f), R, 0, &insertScratch{})
	modelBytes := float64(f.Model.Layers) * f.Model.LayerWeightBytes()
	type option struct {
		m          LayerMap
		flow, gain float64
		net, bytes float64
		fetch      float64 // seconds
		moves      []Move
	}
	score := func(m LayerMap) option {
		o2 := option{m: m, flow: f.Flow(m), moves: Diff(f.Model, committed, m)}
		for _, mv := range o2.moves {
			o2.bytes += mv.LoadBytes
			o2.fetch = max(o2.fetch, FetchSeconds(mv, o.FetchRates))
		}
		switch {
		case res.FlowFrom > 0:
			o2.gain = o2.flow/res.FlowFrom - 1
		case o2.flow > 0 && m.Covers():
			o2.gain = 1 // any full map beats none
		}
		o2.net = o2.gain - o.CostPerModel*o2.bytes/modelBytes - o.CostPerFetchMinute*o2.fetch/60
		return o2
	}
	best := score(plan.Map)
	if lm := local.layerMap(committed.Epoch + 1); lm.Covers() && lm.Replication() >= min(R, committed.Replication()) {
		if c := score(lm); c.net > best.net {
			best = c
		}
	}
	moves, bytes, gain, net := best.moves, best.bytes, best.gain, best.net
	res.FlowTo, res.Bytes, res.FetchSeconds = best.flow, bytes, best.fetch
	if len(moves) == 0 || net < o.MinGain {
		res.Reason = fmt.Sprintf("gain %.1f%% less migration cost %.1f%% is below %.0f%%",
			100*gain, 100*(gain-net), 100*o.MinGain)
		return res, nil
	}
	steps, err := OrderMoves(f, committed, moves)
	if err != nil {
		res.Reason = err.Error()
		return res, nil
	}
	res.Move, res.To, res.Steps = true, best.m, steps
	res.Reason = fmt.Sprintf("gain %.1f%% for %.1f GB of weights in %d step(s)", 100*gain, bytes/1e9, len(steps))
	if best.fetch > 0 {
		res.Reason += fmt.Sprintf(", %.0f s fetching from peers", best.fetch)
	}
	return res, nil
}

// FetchSeconds is how long the move's node takes to fetch what it loads
// from peers at its rate in rates (bytes/s); 0 when it is not in rates
// (it loads from its own file).
func FetchSeconds(mv Move, rates map[string]float64) float64 {
	r, ok := rates[mv.Node]
	if !ok || !(r > 0) || mv.LoadBytes <= 0 {
		return 0
	}
	return mv.LoadBytes / r
}

// warmingRange is what a moving node keeps serving while it loads To: all
// of From when From plus the new layers fit its capacity (make before
// break), otherwise only the layers it keeps.
func warmingRange(f *Fleet, mv Move) Range {
	p, ok := f.Profile(mv.Node)
	if !ok || mv.From.Empty() {
		return Range{}
	}
	ends := EndsOf(mv.From, f.Model.Layers)
	if !mv.To.Empty() {
		ends |= EndsOf(mv.To, f.Model.Layers)
	}
	if mv.From.Len()+mv.Added() <= p.Capacity(ends) {
		return mv.From
	}
	return mv.From.Intersect(mv.To)
}

// OrderMoves puts moves into steps so that, during each step and after it,
// every layer is served by some node that is not reloading it, and no
// node's served plus warming layers exceed its capacity. Each step takes
// every remaining move (in node order) that keeps that true, given the
// moves already chosen for the step. It returns ErrNoSafeOrder when some
// moves can never be made safely.
func OrderMoves(f *Fleet, from LayerMap, moves []Move) ([][]Move, error) {
	cur := from
	rest := append([]Move(nil), moves...)
	sort.SliceStable(rest, func(i, j int) bool { return rest[i].Node < rest[j].Node })
	var steps [][]Move
	for len(rest) > 0 {
		// A layer served now must stay served; one that is not (a gap being
		// repaired) may stay unserved until a move brings it.
		served := cur.Coverage()
		during := append([]int(nil), served...)
		after := cur
		var step, wait []Move
		for _, mv := range rest {
			keep := warmingRange(f, mv)
			tryDuring := append([]int(nil), during...)
			for l := mv.From.Start; l < mv.From.End; l++ {
				if !keep.Contains(l) {
					tryDuring[l]--
				}
			}
			tryAfter := after.Without(mv.Node)
			if !mv.To.Empty() {
				tryAfter = after.With(mv.Node, mv.To)
			}
			if keepsServed(served, tryDuring) && keepsServed(served, tryAfter.Coverage()) {
				during, after = tryDuring, tryAfter
				step = append(step, mv)
			} else {
				wait = append(wait, mv)
			}
		}
		if len(step) == 0 {
			return steps, fmt.Errorf("%w: %d move(s) left, first %s %v→%v", ErrNoSafeOrder, len(wait), wait[0].Node, wait[0].From, wait[0].To)
		}
		steps = append(steps, step)
		cur, rest = after, wait
	}
	return steps, nil
}

// keepsServed reports whether every layer served in before is in now.
func keepsServed(before, now []int) bool {
	for l, c := range before {
		if c > 0 && now[l] <= 0 {
			return false
		}
	}
	return true
}
