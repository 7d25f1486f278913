package layers

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

func TestTrustWeight(t *testing.T) {
	tr := Trust{Full: 4, Checks: map[string]int{"a": 0, "b": 2, "c": 4, "d": 9, "e": -3}, Trusted: map[string]bool{"s": true}}
	for _, c := range []struct {
		id   string
		want float64
	}{
		{"a", 1.0 / 5}, {"b", 3.0 / 5}, {"c", 1}, {"d", 1}, {"e", 1.0 / 5}, {"s", 1}, {"unknown", 1.0 / 5},
	} {
		if got := tr.Weight(c.id); got != c.want {
			t.Errorf("Weight(%s) = %v, want %v", c.id, got, c.want)
		}
	}
	// Weight grows with every check until Full.
	prev := 0.0
	for k := range 6 {
		w := Trust{Full: 4, Checks: map[string]int{"x": k}}.Weight("x")
		if w <= prev && k <= 4 || w > 1 {
			t.Fatalf("%d checks: weight %v after %v", k, w, prev)
		}
		prev = w
	}
	// The zero value weighs everyone fully: placement as before trust.
	if w := (Trust{}).Weight("anyone"); w != 1 {
		t.Fatalf("zero Trust: weight %v", w)
	}
}

func TestTrustWeighScalesSpeed(t *testing.T) {
	tr := Trust{Full: 3, Checks: map[string]int{"b": 1}, Trusted: map[string]bool{"a": true}}
	in := []Node{{ID: "a", Speed: 2}, {ID: "b"}, {ID: "c", Speed: 0.5}}
	out := tr.Weigh(in)
	want := []float64{2, 0.5, 0.5 * 0.25}
	for i, n := range out {
		if n.Speed != want[i] {
			t.Errorf("%s: speed %v, want %v", n.ID, n.Speed, want[i])
		}
	}
	if in[1].Speed != 0 || in[2].Speed != 0.5 {
		t.Fatal("Weigh modified its input")
	}
	// A fresh node's modelled throughput falls by its weight.
	m := smallModel(t, 8)
	h := Hardware{Name: "x", MemoryBytes: 4 * GiB, MemBandwidth: 500 * GB, TFLOPS: 50}
	f := mustFleet(t, m, tr.Weigh([]Node{{ID: "a", Hardware: h}, {ID: "c", Hardware: h}}))
	pa, _ := f.Profile("a")
	pc, _ := f.Profile("c")
	if got, want := pc.TPS(2, 0), pa.TPS(2, 0)/4; got < want*0.999 || got > want*1.001 {
		t.Fatalf("fresh node's tps %v, want a quarter of %v", got, pa.TPS(2, 0))
	}
}

func TestTrustUnvouched(t *testing.T) {
	tr := Trust{Full: 2, Trusted: map[string]bool{"s": true}, Checks: map[string]int{"v": 2, "f": 1}}
	m := LayerMap{Layers: 10, Stages: []Stage{
		{Node: "f", Range: Range{0, 10}},
		{Node: "s", Range: Range{0, 3}},
		{Node: "v", Range: Range{5, 8}},
	}}
	got := tr.Unvouched(m)
	want := []Range{{3, 5}, {8, 10}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("unvouched %v, want %v", got, want)
	}
	if got := (Trust{}).Unvouched(m); len(got) != 0 {
		t.Fatalf("zero Trust: unvouched %v", got)
	}
}

// TestVouchKeepsFreshStages: a map whose fresh node is the only holder of
// some layers gets verified holders for them; the fresh node keeps its
// range and the verified ones only grow.
func TestVouchKeepsFreshStages(t *testing.T) {
	m := smallModel(t, 8)
	h := Hardware{Name: "x", MemoryBytes: 4 * GiB, MemBandwidth: 500 * GB, TFLOPS: 50}
	f := mustFleet(t, m, []Node{{ID: "a", Hardware: h}, {ID: "b", Hardware: h}, {ID: "z", Hardware: h}})
	tr := Trust{Full: 5, Trusted: map[string]bool{"a": true, "b": true}}
	in := LayerMap{Layers: 8, Epoch: 7, Stages: []Stage{
		{Node: "a", Range: Range{0, 3}}, {Node: "b", Range: Range{6, 8}}, {Node: "z", Range: Range{2, 8}},
	}}
	out, ok, err := NewPlanner().Vouch(f, in, tr)
	if err != nil || !ok {
		t.Fatalf("vouch: ok %v, err %v", ok, err)
	}
	if u := tr.Unvouched(out); len(u) != 0 {
		t.Fatalf("still unvouched %v in %v", u, out)
	}
	if r, _ := out.Range("z"); r != (Range{2, 8}) || out.Epoch != 7 {
		t.Fatalf("fresh stage or epoch changed: %v", out)
	}
	for _, id := range []string{"a", "b"} {
		was, _ := in.Range(id)
		now, _ := out.Range(id)
		if now.Intersect(was) != was {
			t.Fatalf("%s shrank from %v to %v", id, was, now)
		}
	}
	// Already vouched: the same map.
	again, ok, err := NewPlanner().Vouch(f, out, tr)
	if err != nil || !ok || !again.Equal(out) {
		t.Fatalf("second vouch changed %v to %v (ok %v, err %v)", out, again, ok, err)
	}
	if _, _, err := NewPlanner().Vouch(f, LayerMap{Layers: 5}, tr); !errors.Is(err, ErrBadMap) {
		t.Fatalf("map of another model: %v", err)
	}
}

// TestVouchRandom checks Vouch against exhaustive search on random small
// fleets: whenever some assignment of ranges to the verified nodes covers
// the model (bruteForce, which shares no code with the planner), Vouch
// succeeds, every layer then has a verified holder, every stage fits its
// node, and the fresh nodes' stages are untouched; when none does, Vouch
// says so and returns the map unchanged.
func TestVouchRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(36, 1))
	m := smallModel(t, 6)
	pl := NewPlanner()
	covered, refused := 0, 0
	for trial := range 60 {
		nodes := randomNodes(rng, 2+rng.IntN(4))
		tr := Trust{Full: 3, Checks: map[string]int{}, Trusted: map[string]bool{}}
		for _, n := range nodes {
			if rng.IntN(2) == 0 {
				tr.Trusted[n.ID] = true
			} else {
				tr.Checks[n.ID] = rng.IntN(3)
			}
		}
		f := mustFleet(t, m, nodes)
		plan, err := pl.Full(f, 1)
		if err != nil {
			continue
		}
		var ver []string
		for _, n := range nodes {
			if tr.Verified(n.ID) {
				ver = append(ver, n.ID)
			}
		}
		coverable := false
		if len(ver) > 0 {
			sub, err := f.Subset(ver)
			if err != nil {
				t.Fatal(err)
			}
			_, bm := bruteForce(sub, 1)
			coverable = bm.Covers()
		}
		out, ok, err := pl.Vouch(f, plan.Map, tr)
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		if ok != coverable {
			t.Fatalf("trial %d: vouch ok %v, but verified nodes %v can cover: %v (map %v)", trial, ok, ver, coverable, plan.Map)
		}
		if !ok {
			refused++
			if !out.Equal(plan.Map) {
				t.Fatalf("trial %d: refused, yet changed the map", trial)
			}
			continue
		}
		covered++
		if u := tr.Unvouched(out); len(u) != 0 || !out.Covers() {
			t.Fatalf("trial %d: unvouched %v in %v", trial, u, out)
		}
		for _, st := range out.Stages {
			if f.StageTPS(st) <= 0 {
				t.Fatalf("trial %d: stage %v does not fit its node", trial, st)
			}
			if !tr.Verified(st.Node) {
				if r, _ := plan.Map.Range(st.Node); r != st.Range {
					t.Fatalf("trial %d: fresh %s moved from %v to %v", trial, st.Node, r, st.Range)
				}
			}
		}
	}
	if covered == 0 || refused == 0 {
		t.Fatalf("only one outcome exercised: %d covered, %d refused", covered, refused)
	}
	t.Logf("%d vouched, %d refused", covered, refused)
}
