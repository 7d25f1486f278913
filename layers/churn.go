package layers

import (
	"fmt"
	"math"
	"sort"
)

// Move is one node's change of range. An empty range means none: an empty
// From is a node taking its first range, an empty To a node giving its up.
type Move struct {
	Node string `json:"node"`
	From Range  `json:"from"`
	To   Range  `json:"to"`
	// LoadBytes is what the node must load: the weights of the layers in
	// To that are not in From, plus an end (embedding or head) it gains.
	LoadBytes float64 `json:"load_bytes"`
}

// Added is the number of layers the move loads.
func (mv Move) Added() int {
	if mv.To.Empty() {
		return 0
	}
	return mv.To.Len() - mv.To.Intersect(mv.From).Len()
}

func moveOf(m ModelSpec, node string, from, to Range) Move {
	mv := Move{Node: node, From: from, To: to}
	mv.LoadBytes = float64(mv.Added()) * m.LayerWeightBytes()
	if !to.Empty() {
		gained := EndsOf(to, m.Layers)
		if !from.Empty() {
			gained &^= EndsOf(from, m.Layers)
		}
		mv.LoadBytes += gained.bytes(m)
	}
	return mv
}

// Diff lists the moves that turn map a into map b, in node order.
func Diff(m ModelSpec, a, b LayerMap) []Move {
	var moves []Move
	ids := append(a.Nodes(), b.Nodes()...)
	sort.Strings(ids)
	for i, id := range ids {
		if i > 0 && ids[i-1] == id {
			continue
		}
		from, _ := a.Range(id)
		to, _ := b.Range(id)
		if from != to {
			moves = append(moves, moveOf(m, id, from, to))
		}
	}
	return moves
}

// Join places one node that is in the fleet but not yet in map m where it
// adds the most flow (ties: where it best lifts the weakest layers, then
// more layers, then the lowest start). No other node moves.
func (pl Planner) Join(f *Fleet, m LayerMap, node string) (Range, error) {
	i := f.Index(node)
	if i < 0 {
		return Range{}, fmt.Errorf("%w: node %q is not in the fleet", ErrBadSpec, node)
	}
	if m.Layers != f.Model.Layers {
		return Range{}, fmt.Errorf("%w: map has %d layers, model %d", ErrBadMap, m.Layers, f.Model.Layers)
	}
	p := newPlacement(f)
	p.load(m.Without(node))
	T := 0.0
	for _, v := range p.c {
		T = math.Max(T, v)
	}
	if T == 0 {
		T = f.Profiles[i].TPS(f.Profiles[i].BestK(), 0)
	}
	r, ok := p.bestInsert(i, insertGoal{T: T, R: pl.replication, minFirst: true, slack: pl.stageSlack}, &insertScratch{})
	if !ok {
		return Range{}, fmt.Errorf("%w: node %q cannot hold a layer", ErrNoCoverage, node)
	}
	return r, nil
}

// Repair mends map m after node left, with as few layers loaded as it
// can: a node that already serves next to a gap extends over it, or an
// idle node takes it. It returns the new map (epoch + 1) and its moves; no
// moves when m without the node still meets the floor. ErrNoCoverage comes
// with the best map it found when capacity cannot close every gap.
func (pl Planner) Repair(f *Fleet, m LayerMap, left string) (LayerMap, []Move, error) {
	out := m.Without(left)
	out.Epoch = m.Epoch + 1
	if m.Layers != f.Model.Layers {
		return out, nil, fmt.Errorf("%w: map has %d layers, model %d", ErrBadMap, m.Layers, f.Model.Layers)
	}
	R := pl.replication
	for guard := 0; guard < 4*f.Model.Layers+f.Len(); guard++ {
		cov := out.Coverage()
		short := shortRanges(cov, R)
		if len(short) == 0 {
			break
		}
		fixed := false
		for _, gap := range short {
			if next, ok := pl.cheapestCover(f, out, gap, left, R); ok {
				out = next
				fixed = true
				break
			}
		}
		if !fixed {
			break
		}
	}
	moves := Diff(f.Model, m.Without(left), out)
	if !out.Covers() {
		return out, moves, fmt.Errorf("%w: gaps %v after %q left", ErrNoCoverage, out.Gaps(), left)
	}
	return out, moves, nil
}

// shortRanges returns the maximal ranges of layers served by fewer than R
// nodes, gaps (no node) first.
func shortRanges(cov []int, R int) []Range {
	var gaps, thin []Range
	appendRun := func(dst []Range, l int) []Range {
		if n := len(dst); n > 0 && dst[n-1].End == l {
			dst[n-1].End++
			return dst
		}
		return append(dst, Range{l, l + 1})
	}
	for l, c := range cov {
		if c == 0 {
			gaps = appendRun(gaps, l)
		} else if c < R {
			thin = appendRun(thin, l)
		}
	}
	return append(gaps, thin...)
}

// cheapestCover finds the change of one node's range that serves the most
// of gap for the fewest loaded layers, without leaving any layer less
// served than before. It returns the new map.
func (pl Planner) cheapestCover(f *Fleet, m LayerMap, gap Range, left string, R int) (LayerMap, bool) {
	L := f.Model.Layers
	cov := m.Coverage()
	type cand struct {
		m      LayerMap
		gained int // layers of the gap newly served by this node
		added  int
		flow   float64
	}
	var best cand
	found := false
	try := func(id string, from, to Range) {
		p, _ := f.Profile(id)
		if to.Empty() || to.Start < 0 || to.End > L || p.TPS(to.Len(), EndsOf(to, L)) <= 0 {
			return
		}
		// Dropping layers must not thin any layer below where it was.
		for l := from.Start; l < from.End; l++ {
			if !to.Contains(l) && cov[l] <= R {
				return
			}
		}
		gained := to.Intersect(gap).Len() - from.Intersect(gap).Len()
		if gained <= 0 {
			return
		}
		c := cand{m: m.With(id, to), gained: gained, added: to.Len() - to.Intersect(from).Len()}
		c.flow = f.Flow(c.m)
		switch {
		case !found:
		case c.gained*best.added != best.gained*c.added: // more gap per loaded layer
			if c.gained*best.added < best.gained*c.added {
				return
			}
		case c.flow <= best.flow:
			return
		}
		best, found = c, true
	}
	for _, pr := range f.Profiles {
		id := pr.Node.ID
		if id == left {
			continue
		}
		from, serving := m.Range(id)
		if !serving {
			// An idle node takes the gap, grown to its best size if it fits.
			k := min(max(gap.Len(), pr.BestK()), pr.MaxLayers, L)
			s := min(gap.Start, L-k)
			try(id, Range{}, Range{s, s + k})
			try(id, Range{}, gap)
			continue
		}
		// Extend over the gap from either side, or slide onto it.
		hull := Range{min(from.Start, gap.Start), max(from.End, gap.End)}
		try(id, from, hull)
		if from.End <= gap.Start {
			try(id, from, Range{from.Start, min(gap.End, from.Start+pr.MaxLayers)})
			try(id, from, Range{max(0, gap.End-from.Len()), gap.End})
		}
		if from.Start >= gap.End {
			try(id, from, Range{max(gap.Start, from.End-pr.MaxLayers), from.End})
			try(id, from, Range{gap.Start, min(L, gap.Start+from.Len())})
		}
	}
	return best.m, found
}
