package layers

import (
	"math"
	"slices"
	"sort"
)

// exactSearch finds the placement with the most flow that meets floor R by
// branch and bound over every contiguous range of every node (or none).
// The bound: the least layer flow so far plus every remaining node's best
// TPS. It gives up (ok = false) after budget search nodes, so it only runs
// on small instances. floor is a flow already achieved, used to prune.
func exactSearch(f *Fleet, R int, floor float64, budget int) (*placement, bool) {
	N, L := f.Len(), f.Model.Layers
	type choice struct {
		r Range
		t float64
	}
	choices := make([][]choice, N)
	maxT := make([]float64, N)
	for i := range N {
		pr := f.Profiles[i]
		for k := 1; k <= min(pr.MaxLayers, L); k++ {
			for s := 0; s+k <= L; s++ {
				r := Range{s, s + k}
				if t := pr.TPS(k, EndsOf(r, L)); t > 0 {
					choices[i] = append(choices[i], choice{r, t})
					maxT[i] = math.Max(maxT[i], t)
				}
			}
		}
		// Strong choices first, so good incumbents come early.
		sort.SliceStable(choices[i], func(a, b int) bool {
			ca, cb := choices[i][a], choices[i][b]
			return ca.t*float64(ca.r.Len()) > cb.t*float64(cb.r.Len())
		})
	}
	order := make([]int, N)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return maxT[order[a]] > maxT[order[b]] })
	rest := make([]float64, N+1) // rest[d] = Σ maxT over order[d:]
	for d := N - 1; d >= 0; d-- {
		rest[d] = rest[d+1] + maxT[order[d]]
	}
	// Nodes with the same choices are interchangeable: of the placements
	// that differ only by swapping two of them, visit one, where the
	// later node's choice comes no earlier in the list than the one
	// before it ("unused" last). The placement found is the one a visit
	// of every permutation finds: visits go in lexicographic order, and
	// sorting a run of twins' choices keeps the flow and comes no later.
	// Swarms of like nodes (a test cluster, a rack of one card) otherwise
	// spent the whole budget on permutations (6 nodes: up to 720 of each
	// placement), then fell back to the heuristic's.
	twin := make([]bool, N) // order[d] has order[d-1]'s choices
	for d := 1; d < N; d++ {
		twin[d] = slices.Equal(choices[order[d]], choices[order[d-1]])
	}
	picked := make([]int, N) // the choice index at each depth; len: unused

	cur := newPlacement(f)
	best := newPlacement(f)
	bestFlow := floor * (1 + 1e-9)
	found := false
	visits := 0
	var rec func(d int) bool
	rec = func(d int) bool {
		visits++
		if visits > budget {
			return false
		}
		lo, cnt := math.Inf(1), math.MaxInt
		for l := range L {
			lo = math.Min(lo, cur.c[l])
			cnt = min(cnt, cur.n[l])
		}
		if d == N {
			if cnt >= R && lo > bestFlow {
				best.copyFrom(cur)
				bestFlow, found = lo, true
			}
			return true
		}
		if lo+rest[d] <= bestFlow || cnt+(N-d) < R {
			return true
		}
		i := order[d]
		first := 0
		if twin[d] {
			first = picked[d-1]
		}
		for k := first; k < len(choices[i]); k++ {
			picked[d] = k
			cur.add(i, choices[i][k].r)
			if !rec(d + 1) {
				return false
			}
			cur.remove(i)
		}
		picked[d] = len(choices[i])
		return rec(d + 1) // node i unused
	}
	if !rec(0) {
		return nil, false
	}
	if !found {
		return nil, true // nothing beats the floor: the caller's answer is optimal
	}
	return best, true
}
