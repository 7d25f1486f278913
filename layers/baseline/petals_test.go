package baseline

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/stratanet/strata/layers"
)

// Block counts by hand for Llama-3-70B (fp16, GQA: 32768 cache tokens):
// layer weights 2·(2·8192² + 2·8192·1024 + 3·8192·28672 + 2·8192)
// = 1,711,308,800 B; cache 32768 · (2·1024·2 B) = 134,217,728 B; so a
// block takes 1,845,526,528 B. An RTX 4090 keeps 0.9 · 24 GiB =
// 23,192,823,398 B: 12.57 → 12 blocks; an A100-80G 77,309,411,328 B:
// 41.89 → 41.
func TestPetalsBlockCount(t *testing.T) {
	f := fleetOf(t, "llama-3-70b", example(t))
	if w := f.Model.LayerWeightBytes(); w != 1711308800 {
		t.Fatalf("layer bytes %v", w)
	}
	r, err := NewPetals().Run(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]int{"rtx4090-0": 12, "rtx3090-3": 12, "a100-80g-1": 41} {
		if r.Blocks[id] != want {
			t.Errorf("%s: %d blocks, want %d", id, r.Blocks[id], want)
		}
	}
	// Petals' own reserve (autograd, 2 GiB·8192/14336 ≈ 1.14 GiB) and its
	// older 16384-token cache: (24 GiB − 1.14 GiB)/(1,711,308,800 B +
	// 67,108,864 B) = 13.8 → 13 blocks.
	r, err = NewPetals(PetalsReserve(2*(1<<30)*8192.0/14336), PetalsCacheTokens(16384)).Run(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	if r.Blocks["rtx4090-0"] != 13 {
		t.Errorf("Petals' reserve: %d blocks, want 13", r.Blocks["rtx4090-0"])
	}
}

// toy is a 4-layer model on 160 MiB devices: a block is 32 MiB of
// weights plus 8192 tokens · 4 KiB of cache, so each server holds
// ⌊0.9·160/64⌋ = 2 blocks.
func toy(t *testing.T, ids ...string) *layers.Fleet {
	t.Helper()
	m, err := layers.NewModelSpec(layers.HyperParams{Name: "toy", Layers: 4, Hidden: 1024, Heads: 8, KVHeads: 8,
		FFN: 4096, Vocab: 4096, BytesPerParam: 2})
	if err != nil {
		t.Fatal(err)
	}
	hw := layers.Hardware{Name: "toy", MemoryBytes: 160 << 20, MemBandwidth: 100 * layers.GB, TFLOPS: 10}
	var nodes []layers.Node
	for _, id := range ids {
		nodes = append(nodes, layers.Node{ID: id, Hardware: hw})
	}
	f, err := layers.NewFleet(m, nodes, layers.DefaultCostParams())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// toyRates returns x, a server's TPS on [0,2) (it holds the embedding),
// and y, on [2,4) (the head, which costs time), and checks the relations
// the hand derivations below rely on.
func toyRates(t *testing.T, f *layers.Fleet) (x, y float64) {
	t.Helper()
	p := f.Profiles[0]
	x, y = p.TPS(2, layers.EndEmbed), p.TPS(2, layers.EndHead)
	if !(y < x*(1-DefaultPetalsEpsilon) && y/x > DefaultPetalsBalanceQuality && x < 2*y) {
		t.Fatalf("toy rates x=%v y=%v do not fit the derivation", x, y)
	}
	return x, y
}

func stagesOf(m layers.LayerMap) map[string]layers.Range {
	out := map[string]layers.Range{}
	for _, s := range m.Stages {
		out[s.Node] = s.Range
	}
	return out
}

// Three equal servers of 2 blocks on a 4-layer model.
//   - a joins an empty swarm: every window is [0 0]; lowest start: [0,2).
//   - b sees t = [x x 0 0]: windows [x x], [0 x], [0 0]: [2,4).
//   - c sees t = [x x y y]: windows [x x], [y x], [y y]; y < x: [2,4).
//
// Checks: a is alone on [0,2) (leaving opens a gap: stays); b without
// itself sees [x x y(1−ε) y(1−ε)], whose best window is its own: stays;
// c likewise. One round, no move; Flow = min(x, 2y) = x.
func TestPetalsThreeEqualServers(t *testing.T) {
	f := toy(t, "a", "b", "c")
	x, _ := toyRates(t, f)
	r, err := NewPetals().Run(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]layers.Range{"a": {Start: 0, End: 2}, "b": {Start: 2, End: 4}, "c": {Start: 2, End: 4}}
	if got := stagesOf(r.Map); len(got) != 3 || got["a"] != want["a"] || got["b"] != want["b"] || got["c"] != want["c"] {
		t.Fatalf("map %v, want %v", got, want)
	}
	if r.Rounds != 1 || r.Checks != 3 || r.Reloads != 0 || !r.Converged {
		t.Errorf("stats %+v", r)
	}
	if got := f.Flow(r.Map); math.Abs(got-x) > 1e-9*x {
		t.Errorf("flow %v, want x = %v", got, x)
	}

	// The join order decides: c first, then a, then b. c takes [0,2),
	// a [2,4), and b sees [x x y y] and joins a.
	r, err = NewPetals(PetalsJoinOrder("c", "a")).Run(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	want = map[string]layers.Range{"c": {Start: 0, End: 2}, "a": {Start: 2, End: 4}, "b": {Start: 2, End: 4}}
	if got := stagesOf(r.Map); got["a"] != want["a"] || got["b"] != want["b"] || got["c"] != want["c"] {
		t.Fatalf("join order c, a, b: map %v, want %v", got, want)
	}
}

// All three servers start on [0,2), leaving [2,4) uncovered (min t = 0).
//
// Check a: without itself t = [2x−εx, 2x−εx, 0, 0]; best start 2. The
// simulation moves a there (t = [2x 2x y y]); a is then alone on [2,4)
// and stays; b without itself sees [x(1−ε) x(1−ε) y y] and moves to 2
// (t = [x x 2y 2y]); c is alone on [0,2). The next pass moves nothing.
// min t after = x > 0 = 0.75·before: a moves. It rejoins with t =
// [2x 2x 0 0] and takes [2,4).
//
// Check b: before = y; the simulation moves b to [2,4) again and ends
// with min t = x, but y/x ≈ 0.94 is not below 0.75: b stays; c likewise.
// A second round moves nothing. Flow = min(2x, y) = y.
func TestPetalsRebalanceMoves(t *testing.T) {
	f := toy(t, "a", "b", "c")
	_, y := toyRates(t, f)
	p := NewPetals()
	st := newPetalsState(f, p.cfg)
	for i := range st.cur {
		st.cur[i] = st.srv[i].place(0, st.L)
	}
	var r PetalsResult
	if err := st.rebalance(context.Background(), []int{0, 1, 2}, &r); err != nil {
		t.Fatal(err)
	}
	got := map[string]layers.Range{}
	for i, c := range st.cur {
		got[f.Profiles[i].Node.ID] = c.r
	}
	want := map[string]layers.Range{"a": {Start: 2, End: 4}, "b": {Start: 0, End: 2}, "c": {Start: 0, End: 2}}
	if got["a"] != want["a"] || got["b"] != want["b"] || got["c"] != want["c"] {
		t.Fatalf("map %v, want %v", got, want)
	}
	if r.Rounds != 2 || r.Checks != 6 || r.Reloads != 1 || r.Moves != 1 || !r.Converged || r.Cycle {
		t.Errorf("stats %+v", r)
	}
	m, err := layers.NewLayerMap(4, 0, layers.Stage{Node: "a", Range: got["a"]},
		layers.Stage{Node: "b", Range: got["b"]}, layers.Stage{Node: "c", Range: got["c"]})
	if err != nil {
		t.Fatal(err)
	}
	if flow := f.Flow(m); math.Abs(flow-y) > 1e-9*y {
		t.Errorf("flow %v, want y = %v", flow, y)
	}

	// With a balance quality of 1, b's check (y/x < 1) moves it too.
	p = NewPetals(PetalsBalanceQuality(1))
	st = newPetalsState(f, p.cfg)
	for i := range st.cur {
		st.cur[i] = st.srv[i].place(0, st.L)
	}
	r = PetalsResult{}
	if err := st.rebalance(context.Background(), []int{0, 1, 2}, &r); err != nil {
		t.Fatal(err)
	}
	if r.Moves < 2 {
		t.Errorf("quality 1: %d moves, want at least 2 (%+v)", r.Moves, r)
	}
}

// The window scan agrees with sorting every window and comparing the
// sorted lists, on random throughputs with many ties.
func TestPetalsBestStartMatchesSorting(t *testing.T) {
	f := fleetOf(t, "llama-3-8b", nodesOf(t, group{"rtx4070", 1}))
	st := newPetalsState(f, NewPetals().cfg)
	L := st.L
	seed := splitmix64(7)
	for trial := range 2000 {
		n := 1 + int(seed.next()%uint64(L))
		// Every window fits: place returns the window itself.
		st.srv[0] = pserver{n: n,
			first: ppos{start: 0, r: layers.Range{Start: 0, End: n}, thr: 1},
			last:  ppos{start: L - n, r: layers.Range{Start: L - n, End: L}, thr: 1},
			mid:   ppos{start: 1, r: layers.Range{Start: 1, End: 1 + n}, thr: 1},
		}
		t1 := make([]float64, L)
		for b := range t1 {
			t1[b] = float64(seed.next() % 4) // few values: many ties
		}
		var excl layers.Range
		delta := 0.0
		if trial%2 == 1 {
			a := int(seed.next() % uint64(L))
			excl = layers.Range{Start: a, End: a + 1 + int(seed.next()%uint64(L-a))}
			delta = 0.5
		}
		got := st.bestStart(t1, sortOrder(t1, nil), 0, excl, delta)

		v := append([]float64(nil), t1...)
		for b := excl.Start; b < excl.End; b++ {
			v[b] -= delta
		}
		want, best := -1, []float64(nil)
		for start := 0; start+n <= L; start++ {
			win := append([]float64(nil), v[start:start+n]...)
			sortFloats(win)
			if want < 0 || lessFloats(win, best) {
				want, best = start, win
			}
		}
		if got != want {
			t.Fatalf("trial %d: n=%d t=%v excl=%v: got %d, want %d", trial, n, t1, excl, got, want)
		}
	}
}

// After a move, the incremental reorder gives an order sorted by the new
// values.
func TestPetalsReorder(t *testing.T) {
	f := fleetOf(t, "llama-3-70b", nodesOf(t, group{"rtx4070", 1}))
	st := newPetalsState(f, NewPetals().cfg)
	L := st.L
	seed := splitmix64(11)
	for trial := range 500 {
		t1 := make([]float64, L)
		for b := range t1 {
			t1[b] = float64(seed.next()%1000) / 7
		}
		ord := sortOrder(t1, nil)
		rng := func() layers.Range {
			a := int(seed.next() % uint64(L))
			return layers.Range{Start: a, End: a + 1 + int(seed.next()%uint64(L-a))}
		}
		old, now := rng(), rng()
		a, b := float64(seed.next()%500)/3, float64(seed.next()%500)/3
		addRange(t1, old, -a)
		addRange(t1, now, b)
		ord = st.reorder(t1, ord, old, now)
		if len(ord) != L {
			t.Fatalf("trial %d: %d blocks", trial, len(ord))
		}
		seen := make([]bool, L)
		for j, x := range ord {
			if seen[x] {
				t.Fatalf("trial %d: block %d twice", trial, x)
			}
			seen[x] = true
			if j > 0 && t1[ord[j-1]] > t1[x] {
				t.Fatalf("trial %d: not sorted at %d", trial, j)
			}
		}
	}
}

func sortFloats(x []float64) {
	for i := 1; i < len(x); i++ {
		for j := i; j > 0 && x[j] < x[j-1]; j-- {
			x[j], x[j-1] = x[j-1], x[j]
		}
	}
}

func lessFloats(a, b []float64) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// A window at an end is trimmed to what fits beside the embedding or the
// head, and every stage of a Petals map has positive throughput.
func TestPetalsTrimsEnds(t *testing.T) {
	f := fleetOf(t, "llama-3-70b", nodesOf(t, group{"rtx4070", 30}))
	r, err := NewPetals().Run(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	p := f.Profiles[0]
	n := r.Blocks[p.Node.ID]
	if n <= p.Capacity(layers.EndEmbed) {
		t.Skipf("no trimming needed: %d blocks, %d fit with the embedding", n, p.Capacity(layers.EndEmbed))
	}
	trimmed := false
	for _, s := range r.Map.Stages {
		if !(f.StageTPS(s) > 0) {
			t.Errorf("%s %v: TPS 0", s.Node, s.Range)
		}
		if s.Len() < n {
			trimmed = true
			if layers.EndsOf(s.Range, f.Model.Layers) == 0 {
				t.Errorf("%s %v trimmed in the middle", s.Node, s.Range)
			}
		}
	}
	if !trimmed {
		t.Errorf("no end window was trimmed")
	}
}

// Seeded orders are deterministic and may differ from the fixed order.
func TestPetalsSeed(t *testing.T) {
	f := mixed(t, "llama-3-70b", 40, "rtx4090", "rtx3090", "a100-80g", "rtx4070", "l40s")
	a, err := NewPetals(PetalsSeed(42)).Run(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewPetals(PetalsSeed(42)).Run(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Map.Equal(b.Map) || a.Checks != b.Checks {
		t.Fatal("the same seed gave different runs")
	}
	checkMap(t, f, a.Map)
}

func TestPetalsSkipsNodesWithoutRoom(t *testing.T) {
	nodes := nodesOf(t, group{"rtx4090", 8})
	nodes = append(nodes, layers.Node{ID: "tiny", Hardware: layers.Hardware{Name: "tiny",
		MemoryBytes: 1 << 30, MemBandwidth: 100 * layers.GB, TFLOPS: 10}})
	f := fleetOf(t, "llama-3-70b", nodes)
	r, err := NewPetals().Run(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Skipped) != 1 || r.Skipped[0] != "tiny" || r.Blocks["tiny"] != 0 {
		t.Errorf("skipped %v, blocks %d", r.Skipped, r.Blocks["tiny"])
	}
	if _, ok := r.Map.Range("tiny"); ok {
		t.Error("tiny node in the map")
	}
	if _, err := NewPetals().Run(context.Background(), fleetOf(t, "llama-3-70b", nodes[8:])); !errors.Is(err, ErrNoCapacity) {
		t.Errorf("tiny alone: %v", err)
	}
}
