package layers

import (
	"math"
	"math/bits"
)

// placement is the planners' working state: one range per node (empty when
// the node is unused) and the per-layer flow and node count they give.
type placement struct {
	f   *Fleet
	L   int
	rng []Range
	t   []float64
	c   []float64
	n   []int
}

func newPlacement(f *Fleet) *placement {
	N, L := f.Len(), f.Model.Layers
	return &placement{f: f, L: L, rng: make([]Range, N), t: make([]float64, N),
		c: make([]float64, L), n: make([]int, L)}
}

func (p *placement) reset() {
	clear(p.rng)
	clear(p.t)
	clear(p.c)
	clear(p.n)
}

func (p *placement) copyFrom(o *placement) {
	copy(p.rng, o.rng)
	copy(p.t, o.t)
	copy(p.c, o.c)
	copy(p.n, o.n)
}

func (p *placement) tps(i int, r Range) float64 {
	return p.f.Profiles[i].TPS(r.Len(), EndsOf(r, p.L))
}

func (p *placement) add(i int, r Range) {
	if !p.rng[i].Empty() {
		p.remove(i)
	}
	t := p.tps(i, r)
	p.rng[i], p.t[i] = r, t
	for l := r.Start; l < r.End; l++ {
		p.c[l] += t
		p.n[l]++
	}
}

func (p *placement) remove(i int) {
	r, t := p.rng[i], p.t[i]
	for l := r.Start; l < r.End; l++ {
		p.c[l] -= t
		p.n[l]--
		if p.n[l] == 0 {
			p.c[l] = 0 // no float residue on an empty layer
		}
	}
	p.rng[i], p.t[i] = Range{}, 0
}

func (p *placement) minFlow() float64 {
	lo := math.Inf(1)
	for _, v := range p.c {
		lo = math.Min(lo, v)
	}
	if p.L == 0 {
		return 0
	}
	return math.Max(lo, 0)
}

func (p *placement) minCount() int {
	lo := math.MaxInt
	for _, v := range p.n {
		lo = min(lo, v)
	}
	if p.L == 0 {
		return 0
	}
	return lo
}

// deficit is how far the layers fall short of flow T and replication R, in
// units where one layer fully short of both counts 2.
func (p *placement) deficit(T float64, R int) float64 {
	d := 0.0
	for l := range p.c {
		d += layerDeficit(p.c[l], p.n[l], T, R)
	}
	return d
}

func (p *placement) layerMap(epoch uint64) LayerMap {
	m := LayerMap{Epoch: epoch, Layers: p.L}
	for i, r := range p.rng {
		if !r.Empty() {
			m.Stages = append(m.Stages, Stage{Node: p.f.Profiles[i].Node.ID, Range: r})
		}
	}
	return m // Profiles are sorted by ID, so the stages are too
}

func (p *placement) load(m LayerMap) {
	p.reset()
	for _, s := range m.Stages {
		if i := p.f.Index(s.Node); i >= 0 && s.End <= p.L && s.Start >= 0 && !s.Empty() {
			p.add(i, s.Range)
		}
	}
}

// rangeMin answers minimum-over-window queries on a fixed array in O(1).
type rangeMin struct{ tab [][]float64 }

func (q *rangeMin) build(a []float64) {
	n := len(a)
	levels := bits.Len(uint(max(n, 1)))
	if cap(q.tab) < levels {
		q.tab = make([][]float64, levels)
	}
	q.tab = q.tab[:levels]
	q.tab[0] = append(q.tab[0][:0], a...)
	for j := 1; j < levels; j++ {
		w := 1 << j
		prev := q.tab[j-1]
		row := q.tab[j][:0]
		for i := 0; i+w <= n; i++ {
			row = append(row, min(prev[i], prev[i+w/2]))
		}
		q.tab[j] = row
	}
}

// min of a[s:e], e > s.
func (q *rangeMin) min(s, e int) float64 {
	j := bits.Len(uint(e-s)) - 1
	return min(q.tab[j][s], q.tab[j][e-(1<<j)])
}

// insertGoal says what a placement of one node should maximise.
type insertGoal struct {
	T         float64 // flow target for the gain: deficits below T count
	R         int     // replication floor
	minFirst  bool    // rank by the new least flow first, gain second
	slack     float64 // among layer counts within slack of the best, take the most layers
	minLayers int     // smallest layer count allowed (a node's capacity overrides)
	// quantize counts a node below T as T/m, m = ⌈T/t⌉: the share it has
	// in a layer that m such nodes lift to T. It steers nodes to sizes that
	// tile the target in whole rows instead of leaving thin remainders.
	quantize bool
}

type candidate struct {
	r      Range
	gain   float64
	newMin float64
	ok     bool
}

// scratch buffers reused across insertions.
type insertScratch struct {
	pre, suf, a []float64
	d, rp       []float64
	q           rangeMin
	best        []candidate
	work        int // what is left of the local search's budget
}

// bestInsert finds the best range for node i given the other nodes' current
// placement (node i must be unplaced). It returns false when the node can
// hold no layer.
func (p *placement) bestInsert(i int, g insertGoal, sc *insertScratch) (Range, bool) {
	prof := &p.f.Profiles[i]
	L := p.L
	kmax := min(prof.MaxLayers, L)
	if kmax <= 0 {
		return Range{}, false
	}
	sc.pre = grow(sc.pre, L+1)
	sc.suf = grow(sc.suf, L+1)
	sc.a = grow(sc.a, L+1)
	// pre[s] = min c over [0,s), suf[e] = min c over [e,L).
	inf := math.Inf(1)
	sc.pre[0] = inf
	for l := 0; l < L; l++ {
		sc.pre[l+1] = min(sc.pre[l], p.c[l])
	}
	sc.suf[L] = inf
	for l := L - 1; l >= 0; l-- {
		sc.suf[l] = min(sc.suf[l+1], p.c[l])
	}
	sc.q.build(p.c)
	if cap(sc.best) < kmax+1 {
		sc.best = make([]candidate, kmax+1)
	}
	sc.best = sc.best[:kmax+1]
	clear(sc.best)

	// The flow part of a window's gain is Σ min(t, T − c_l) over its
	// layers; the replication part counts layers below the floor. A copy
	// counts towards the floor in proportion to the flow it brings, so that
	// weak nodes do not chase replication with long, slow ranges; with no
	// flow target every copy counts fully. Replication 1 is implied by any
	// flow target.
	T := g.T
	useRep := g.R > 1 || T <= 0
	sc.d = grow(sc.d, L)
	sc.rp = grow(sc.rp, L+1)
	sc.rp[0] = 0
	for l := 0; l < L; l++ {
		sc.d[l] = 0
		if T > 0 && p.c[l] < T {
			sc.d[l] = T - p.c[l]
		}
		sc.rp[l+1] = sc.rp[l]
		if useRep && p.n[l] < g.R {
			sc.rp[l+1]++
		}
	}
	share := func(t float64) float64 { // t as counted in gains
		if g.quantize && T > 0 && t < T {
			return T / math.Ceil(T/t)
		}
		return t
	}
	repGain := func(t float64) float64 { // per layer below the floor
		if !useRep {
			return 0
		}
		if T <= 0 {
			return 1 / float64(g.R)
		}
		return min(1, t/T) / float64(g.R)
	}
	windowGain := func(r Range, t float64) float64 {
		t = share(t)
		v := 0.0
		if T > 0 {
			for l := r.Start; l < r.End; l++ {
				v += min(t, sc.d[l])
			}
			v /= T
		}
		return v + repGain(t)*(sc.rp[r.End]-sc.rp[r.Start])
	}
	for k := 1; k <= kmax; k++ {
		if k < g.minLayers && k < kmax {
			continue
		}
		t0 := prof.TPS(k, 0)
		if t0 <= 0 && prof.TPS(k, EndEmbed) <= 0 && prof.TPS(k, EndHead) <= 0 && prof.TPS(k, EndEmbed|EndHead) <= 0 {
			continue
		}
		// Prefix sums of the flow gain of a middle window (no ends).
		ts := share(t0)
		rg := repGain(ts)
		sc.a[0] = 0
		if T > 0 {
			for l := 0; l < L; l++ {
				sc.a[l+1] = sc.a[l] + min(ts, sc.d[l])
			}
		} else {
			clear(sc.a)
		}
		bc := &sc.best[k]
		for s := 0; s+k <= L; s++ {
			r := Range{s, s + k}
			e := EndsOf(r, L)
			t := t0
			var gain float64
			if e != 0 {
				t = prof.TPS(k, e)
				gain = windowGain(r, t)
			} else {
				gain = rg * (sc.rp[r.End] - sc.rp[r.Start])
				if T > 0 {
					gain += (sc.a[r.End] - sc.a[r.Start]) / T
				}
			}
			if t <= 0 {
				continue
			}
			// Gain first: most windows lose on gain alone, before the
			// costlier least-flow query.
			if bc.ok && !g.minFirst && gain < bc.gain-eps*max(1, bc.gain) {
				continue
			}
			c := candidate{r: r, gain: gain, ok: true,
				newMin: min(sc.pre[s], sc.suf[s+k], sc.q.min(s, s+k)+t)}
			if !bc.ok || g.better(c, *bc) {
				*bc = c
			}
		}
	}
	// Across layer counts: find the best, then prefer more layers (fewer
	// stages per path) among those within slack of it.
	var top candidate
	for k := 1; k <= kmax; k++ {
		if c := sc.best[k]; c.ok && (!top.ok || g.better(c, top)) {
			top = c
		}
	}
	if !top.ok {
		return Range{}, false
	}
	if g.slack > 0 {
		for k := kmax; k > top.r.Len(); k-- {
			c := sc.best[k]
			if c.ok && g.within(c, top) {
				return c.r, true
			}
		}
	}
	return top.r, true
}

const eps = 1e-9

func (g insertGoal) better(a, b candidate) bool {
	if g.minFirst {
		if d := cmpTol(a.newMin, b.newMin); d != 0 {
			return d > 0
		}
		if d := cmpTol(a.gain, b.gain); d != 0 {
			return d > 0
		}
	} else {
		if d := cmpTol(a.gain, b.gain); d != 0 {
			return d > 0
		}
		if d := cmpTol(a.newMin, b.newMin); d != 0 {
			return d > 0
		}
	}
	if a.r.Len() != b.r.Len() {
		return a.r.Len() > b.r.Len()
	}
	return a.r.Start < b.r.Start
}

// within reports whether a is at most slack worse than b on the primary key
// and not worse on the secondary one beyond the same slack.
func (g insertGoal) within(a, b candidate) bool {
	ok := func(x, y float64) bool { return x >= y-g.slack*math.Abs(y)-eps }
	return ok(a.gain, b.gain) && ok(a.newMin, b.newMin)
}

func cmpTol(a, b float64) int {
	// Relative tolerance on the magnitudes at hand; cheap, since this runs
	// once per candidate window.
	s := a + b
	if s < 0 {
		s = -s
	}
	tol := eps * (1 + s)
	switch d := a - b; {
	case d > tol:
		return 1
	case d < -tol:
		return -1
	}
	return 0
}

func grow(s []float64, n int) []float64 {
	if cap(s) < n {
		return make([]float64, n)
	}
	return s[:n]
}
