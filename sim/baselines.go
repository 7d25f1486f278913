package sim

import (
	"context"
	"math"
	"sort"

	"github.com/stratanet/strata/layers"
)

// The baselines' placement: Petals' joins and rebalance checks, and
// Parallax's re-bootstrap, on the roster (Strata's is the leader's,
// leader.go).

// petalsThroughput is t[b]: the summed throughput of the servers (loaded or
// loading) covering each block, from their cost-model rate.
func (ro *roster) petalsThroughput(except int) []float64 {
	t := make([]float64, ro.w.m.model.Layers)
	f := ro.w.m.all
	for _, st := range ro.committed.Stages {
		j := ro.w.m.idx[st.Node]
		if j == except || !ro.known[j] {
			continue
		}
		p, ok := f.Profile(st.Node)
		if !ok {
			continue
		}
		v := p.TPS(st.Len(), layers.EndsOf(st.Range, ro.w.m.model.Layers))
		for b := st.Start; b < st.End; b++ {
			t[b] += v
		}
	}
	return t
}

func (ro *roster) petalsJoin(i int) {
	if !ro.up[i] {
		return
	}
	ro.known[i] = true
	n := min(ro.w.m.maxL[i], ro.w.m.model.Layers)
	start := petalsStart(ro.petalsThroughput(-1), n)
	r := layers.Range{Start: start, End: start + n}
	ro.committed = ro.committed.With(ro.w.spec.Nodes[i].ID, r)
	ro.load(i, r, false, false)
}

// petalsRebalance is one round of Petals' rebalance check: servers in
// random order; the first whose move lifts the swarm's minimum by more
// than 1/0.75 leaves its span (break before make) and loads the new one.
func (ro *roster) petalsRebalance() {
	// Forget servers the DHT no longer lists.
	for _, st := range ro.committed.Stages {
		if j := ro.w.m.idx[st.Node]; !ro.known[j] {
			ro.committed = ro.committed.Without(st.Node)
		}
	}
	order := ro.members()
	ro.w.rand.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
	before := minOf64(ro.petalsThroughput(-1))
	for _, i := range order {
		if !ro.up[i] {
			continue
		}
		cur, ok := ro.committed.Range(ro.w.spec.Nodes[i].ID)
		if !ok {
			continue
		}
		t := ro.petalsThroughput(i)
		if gap := minOf64(t[cur.Start:cur.End]); gap == 0 {
			continue // leaving would open a gap
		}
		n := cur.Len()
		start := petalsStart(t, n)
		if start == cur.Start {
			continue
		}
		p, _ := ro.w.m.all.Profile(ro.w.spec.Nodes[i].ID)
		r := layers.Range{Start: start, End: start + n}
		v := p.TPS(n, layers.EndsOf(r, ro.w.m.model.Layers))
		for b := r.Start; b < r.End; b++ {
			t[b] += v
		}
		after := minOf64(t)
		if after > 0 && before/after < 0.75 {
			ro.committed = ro.committed.With(ro.w.spec.Nodes[i].ID, r)
			ro.load(i, r, false, false)
			return
		}
	}
}

// parallaxRebootstrap: a leave broke the pipelines; every node goes to
// standby and the allocator places the live ones from scratch. Every node
// whose range changes reloads, and everything in flight is lost.
func (ro *roster) parallaxRebootstrap() {
	live := ro.members()
	lm, err := ro.plan(context.Background(), live)
	if err != nil {
		return
	}
	ro.committed = lm
	for i := range ro.serving {
		r, ok := lm.Range(ro.w.spec.Nodes[i].ID)
		if !ok {
			ro.stopServing(i)
			continue
		}
		if ro.serving[i] && r == ro.rng[i] {
			ro.w.s.kill(i, causeMoved) // executors restart: in-flight lost
			ro.w.s.revive(i, r.Start, r.End)
			continue
		}
		ro.load(i, r, false, false)
	}
}

// petalsStart is Petals' block choice for n blocks: the window whose
// sorted throughputs are lexicographically smallest, lowest start first.
func petalsStart(t []float64, n int) int {
	best, bestKey := 0, []float64(nil)
	for i := 0; i+n <= len(t); i++ {
		key := append([]float64(nil), t[i:i+n]...)
		sort.Float64s(key)
		if bestKey == nil || lexLess(key, bestKey) {
			best, bestKey = i, key
		}
	}
	return best
}

func lexLess(a, b []float64) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

func minOf64(t []float64) float64 {
	m := math.Inf(1)
	for _, v := range t {
		m = math.Min(m, v)
	}
	if math.IsInf(m, 1) {
		return 0
	}
	return m
}
