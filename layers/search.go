package layers

import "math"

// improve is a min-conflicts local search. It sets a target a little above
// the current least flow and changes the placement wherever that shrinks
// the total shortfall against it without lowering the least flow or the
// replication met: first by re-inserting single nodes at their best (layer
// count, start), then by re-splitting pairs of neighbouring nodes over the
// hull of their ranges, which single moves cannot reach. When the target is
// met it is raised; when no move helps, the step shrinks.
//
// The search is bounded by a work budget counted in layer evaluations, not
// by a clock, so that it stays deterministic and a 1,000-node plan stays
// well under a second.
func (pl Planner) improve(p *placement, R, minLayers int, sc *insertScratch) {
	N := p.f.Len()
	if N == 0 || p.L == 0 {
		return
	}
	sc.work = pl.workBudget
	step := 0.05
	for step >= 0.002 && sc.work > 0 {
		base := p.minFlow()
		T := base * (1 + step)
		if base <= 0 {
			T = math.Max(p.f.UB2()*0.01, 1e-9)
		}
		met := false
		for pass := 0; pass < pl.searchPasses && !met; pass++ {
			moved := false
			for i := range N {
				if sc.work <= 0 {
					return
				}
				if p.deficit(T, R) <= eps {
					met = true
					break
				}
				if pl.reinsert(p, i, T, R, minLayers, sc) {
					moved = true
				}
			}
			if !met && !moved {
				moved = pl.resplitPass(p, T, R, sc)
			}
			if p.deficit(T, R) <= eps {
				met = true
			}
			if !moved {
				break
			}
		}
		if !met {
			step /= 2
		}
	}
}

// accept reports whether the placement got better: more least flow, or the
// same with less shortfall, never a lower replication floor.
func accept(p *placement, T float64, R int, flow0, d0 float64, floor int) bool {
	if p.minCount() < floor {
		return false
	}
	f := p.minFlow()
	if f > flow0*(1+eps) {
		return true
	}
	return f >= flow0*(1-eps) && p.deficit(T, R) < d0-eps
}

func (pl Planner) reinsert(p *placement, i int, T float64, R, minLayers int, sc *insertScratch) bool {
	old := p.rng[i]
	if old.Empty() {
		return false
	}
	floor, flow0, d0 := min(R, p.minCount()), p.minFlow(), p.deficit(T, R)
	p.remove(i)
	sc.work -= p.L * min(p.L, p.f.Profiles[i].MaxLayers)
	r, ok := p.bestInsert(i, insertGoal{T: T, R: R, slack: pl.stageSlack, minLayers: minLayers}, sc)
	if ok && r != old {
		p.add(i, r)
		if accept(p, T, R, flow0, d0, floor) {
			return true
		}
		p.remove(i)
	}
	p.add(i, old)
	return false
}

// resplitPass tries re-splits of each node on a bottleneck layer with each
// node whose range touches or overlaps its own. It stops at the first that
// helps.
func (pl Planner) resplitPass(p *placement, T float64, R int, sc *insertScratch) bool {
	lo := p.minFlow()
	for i := range p.rng {
		ri := p.rng[i]
		if ri.Empty() || !p.onBottleneck(ri, lo) {
			continue
		}
		for j := range p.rng {
			rj := p.rng[j]
			if j == i || rj.Empty() || rj.Start > ri.End || rj.End < ri.Start {
				continue
			}
			if sc.work <= 0 {
				return false
			}
			hull := max(ri.End, rj.End) - min(ri.Start, rj.Start)
			sc.work -= p.L + 2*hull*hull*min(hull, p.f.Profiles[i].MaxLayers)
			if pl.resplit(p, i, j, T, R) {
				return true
			}
		}
	}
	return false
}

func (p *placement) onBottleneck(r Range, lo float64) bool {
	for l := r.Start; l < r.End; l++ {
		if p.c[l] <= lo*(1+1e-6) {
			return true
		}
	}
	return false
}

// resplit gives nodes i and j new ranges that together cover the hull of
// their current ones, one from each end (overlap allowed), and keeps the
// best if it is better than now.
func (pl Planner) resplit(p *placement, i, j int, T float64, R int) bool {
	ri, rj := p.rng[i], p.rng[j]
	hull := Range{min(ri.Start, rj.Start), max(ri.End, rj.End)}
	floor, flow0, d0 := min(R, p.minCount()), p.minFlow(), p.deficit(T, R)
	p.remove(i)
	p.remove(j)
	// Outside the hull nothing changes.
	outMin, outDef := math.Inf(1), 0.0
	outCnt := math.MaxInt
	for l := 0; l < p.L; l++ {
		if hull.Contains(l) {
			continue
		}
		outMin = math.Min(outMin, p.c[l])
		outCnt = min(outCnt, p.n[l])
		outDef += layerDeficit(p.c[l], p.n[l], T, R)
	}
	type cand struct {
		a, b Range // for the left node, the right node
		left int
		min  float64
		def  float64
	}
	best := cand{min: -1}
	U := hull.Len()
	for side := 0; side < 2; side++ {
		left, right := i, j
		if side == 1 {
			left, right = j, i
		}
		pa, pb := &p.f.Profiles[left], &p.f.Profiles[right]
		for ka := 1; ka <= min(pa.MaxLayers, U); ka++ {
			a := Range{hull.Start, hull.Start + ka}
			ta := pa.TPS(ka, EndsOf(a, p.L))
			if ta <= 0 {
				continue
			}
			for kb := max(1, U-ka); kb <= min(pb.MaxLayers, U); kb++ {
				b := Range{hull.End - kb, hull.End}
				tb := pb.TPS(kb, EndsOf(b, p.L))
				if tb <= 0 {
					continue
				}
				mn, def, cnt := outMin, outDef, outCnt
				for l := hull.Start; l < hull.End; l++ {
					c, n := p.c[l], p.n[l]
					if a.Contains(l) {
						c, n = c+ta, n+1
					}
					if b.Contains(l) {
						c, n = c+tb, n+1
					}
					mn = math.Min(mn, c)
					cnt = min(cnt, n)
					def += layerDeficit(c, n, T, R)
				}
				if cnt < floor {
					continue
				}
				if d := cmpTol(mn, best.min); d > 0 || (d == 0 && def < best.def-eps) {
					best = cand{a: a, b: b, left: left, min: mn, def: def}
				}
			}
		}
	}
	if best.min >= 0 {
		other := i
		if best.left == i {
			other = j
		}
		p.add(best.left, best.a)
		p.add(other, best.b)
		if accept(p, T, R, flow0, d0, floor) {
			return true
		}
		p.remove(i)
		p.remove(j)
	}
	p.add(i, ri)
	p.add(j, rj)
	return false
}

func layerDeficit(c float64, n int, T float64, R int) float64 {
	d := 0.0
	if T > 0 && c < T {
		d += (T - c) / T
	}
	if n < R {
		d += float64(R-n) / float64(R)
	}
	return d
}
