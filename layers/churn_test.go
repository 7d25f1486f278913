package layers

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestJoinLeaveRejoinKeepsCoverage runs random churn: nodes leave (repair),
// join (placement) and rejoin, and the map covers every layer throughout
// while capacity allows.
func TestJoinLeaveRejoinKeepsCoverage(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 8; trial++ {
		m := smallModel(t, 10+rng.IntN(30))
		nodes := randomNodes(rng, 12+rng.IntN(12))
		f := mustFleet(t, m, nodes)
		pl := NewPlanner()
		plan, err := pl.Full(f, 1)
		if err != nil {
			t.Fatal(err)
		}
		cur := plan.Map
		out := map[string]bool{}
		for step := 0; step < 30; step++ {
			id := nodes[rng.IntN(len(nodes))].ID
			if out[id] {
				r, err := pl.Join(f, cur, id)
				if err != nil {
					t.Fatalf("join %s: %v", id, err)
				}
				before := f.Flow(cur)
				cur = cur.With(id, r)
				if f.Flow(cur) < before*(1-1e-9) {
					t.Fatalf("join lowered flow")
				}
				delete(out, id)
			} else {
				next, moves, err := pl.Repair(f, cur, id)
				if errors.Is(err, ErrNoCoverage) {
					// Only when the rest cannot cover: check that claim.
					if restCapacity(f, cur.Without(id), out, id) >= m.Layers+4 {
						t.Fatalf("repair gave up with capacity to spare: %v", err)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if _, still := next.Range(id); still {
					t.Fatalf("repair kept the node that left")
				}
				for _, mv := range moves {
					if mv.Node == id {
						t.Fatalf("repair moved the node that left")
					}
				}
				out[id] = true
				cur = next
			}
			if !cur.Covers() {
				t.Fatalf("trial %d step %d: gaps %v", trial, step, cur.Gaps())
			}
			for _, s := range cur.Stages {
				if f.StageTPS(s) <= 0 {
					t.Fatalf("node %s over capacity at %v", s.Node, s.Range)
				}
			}
		}
	}
}

func restCapacity(f *Fleet, m LayerMap, out map[string]bool, left string) int {
	c := 0
	for _, p := range f.Profiles {
		if !out[p.Node.ID] && p.Node.ID != left {
			c += p.Capacity(0)
		}
	}
	return c
}

func TestRepairNeedsNoMoveWhenReplicated(t *testing.T) {
	m := smallModel(t, 8)
	f := mustFleet(t, m, randomNodes(rand.New(rand.NewPCG(5, 5)), 10))
	plan, err := NewPlanner().Full(f, 4)
	if err != nil || plan.Replication < 2 {
		t.Fatalf("plan: %v replication %d", err, plan.Replication)
	}
	gone := plan.Map.Stages[0].Node
	next, moves, err := NewPlanner(WithReplication(1)).Repair(f, plan.Map, gone)
	if err != nil || len(moves) != 0 || next.Epoch != 5 || !next.Covers() {
		t.Fatalf("repair of a replicated map: %v moves=%v epoch=%d", err, moves, next.Epoch)
	}
}

func TestRepairFewestLoadedLayers(t *testing.T) {
	m := smallModel(t, 12)
	nodes := randomNodes(rand.New(rand.NewPCG(6, 6)), 4)
	f := mustFleet(t, m, nodes)
	// a [0,4) b [4,8) c [8,12), d idle. b leaves: the cheapest repair
	// loads 4 layers (a gap of 4), never more.
	ids := []string{nodes[0].ID, nodes[1].ID, nodes[2].ID}
	cur, _ := NewLayerMap(12, 1, Stage{ids[0], Range{0, 4}}, Stage{ids[1], Range{4, 8}}, Stage{ids[2], Range{8, 12}})
	next, moves, err := NewPlanner(WithReplication(1)).Repair(f, cur, ids[1])
	if err != nil {
		t.Skipf("these nodes cannot cover the gap: %v", err) // depends on random memory
	}
	loaded := 0
	for _, mv := range moves {
		loaded += mv.Added()
	}
	if loaded != 4 || !next.Covers() {
		t.Fatalf("repair loaded %d layers (moves %v), want 4", loaded, moves)
	}
}

// TestRebalanceStepsKeepEveryLayerServed: a rebalance after speeds change
// is ordered so that at every step every layer has a server that is not
// reloading it, and no node exceeds its capacity.
func TestRebalanceStepsKeepEveryLayerServed(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	moved := 0
	for trial := 0; trial < 20; trial++ {
		m := smallModel(t, 8+rng.IntN(24))
		nodes := randomNodes(rng, 6+rng.IntN(20))
		f := mustFleet(t, m, nodes)
		plan, err := NewPlanner().Full(f, 1)
		if err != nil {
			continue
		}
		// Measured speeds differ from the model: some nodes are slower.
		for i := range nodes {
			nodes[i].Speed = 0.3 + 1.4*rng.Float64()
		}
		measured := mustFleet(t, m, nodes)
		rb, err := NewPlanner().Rebalance(measured, plan.Map, RebalanceOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !rb.Move {
			if rb.Reason == "" {
				t.Fatal("a decision without a reason")
			}
			continue
		}
		moved++
		if rb.FlowTo < rb.FlowFrom*1.10 {
			t.Fatalf("moved for a gain of %.3f", rb.FlowTo/rb.FlowFrom)
		}
		checkSteps(t, measured, plan.Map, rb)
	}
	if moved == 0 {
		t.Fatal("no trial rebalanced: the test checks nothing")
	}
	t.Logf("%d of 20 trials rebalanced", moved)
}

func checkSteps(t *testing.T, f *Fleet, from LayerMap, rb Rebalance) {
	t.Helper()
	cur := from
	for si, step := range rb.Steps {
		served := make([]int, f.Model.Layers)
		moving := map[string]Move{}
		for _, mv := range step {
			moving[mv.Node] = mv
		}
		for _, s := range cur.Stages {
			r := s.Range
			if mv, ok := moving[s.Node]; ok {
				r = warmingRange(f, mv)
				p, _ := f.Profile(s.Node)
				// Served plus warming layers fit the node.
				if held := r.Len() + mv.To.Len() - mv.To.Intersect(r).Len(); r == mv.From && held > p.MaxLayers {
					t.Fatalf("step %d: %s holds %d layers > capacity %d", si, s.Node, held, p.MaxLayers)
				}
			}
			for l := r.Start; l < r.End; l++ {
				served[l]++
			}
		}
		for l, c := range served {
			if c == 0 {
				t.Fatalf("step %d: layer %d has no server that is not reloading it", si, l)
			}
		}
		for _, mv := range step {
			if mv.To.Empty() {
				cur = cur.Without(mv.Node)
			} else {
				cur = cur.With(mv.Node, mv.To)
			}
		}
		if !cur.Covers() {
			t.Fatalf("after step %d: gaps %v", si, cur.Gaps())
		}
	}
	if !cur.SameStages(rb.To) {
		t.Fatalf("steps do not reach the target map")
	}
}

func TestOrderMovesRefusesAnUnsafeSwap(t *testing.T) {
	m := smallModel(t, 4)
	// Two nodes that can each hold only two layers swap halves: one of
	// them must drop its half before the other has loaded it.
	tiny := Hardware{Name: "t", MemoryBytes: 0.6 * GiB, MemBandwidth: 500 * GB, TFLOPS: 50}
	f := mustFleet(t, m, []Node{{ID: "a", Hardware: tiny}, {ID: "b", Hardware: tiny}})
	pa, _ := f.Profile("a")
	if pa.Capacity(EndEmbed|EndHead) >= 4 {
		t.Skip("device too big for this case")
	}
	from, _ := NewLayerMap(4, 1, Stage{"a", Range{0, 2}}, Stage{"b", Range{2, 4}})
	to, _ := NewLayerMap(4, 2, Stage{"a", Range{2, 4}}, Stage{"b", Range{0, 2}})
	if _, err := OrderMoves(f, from, Diff(m, from, to)); !errors.Is(err, ErrNoSafeOrder) {
		t.Fatalf("want ErrNoSafeOrder, got %v", err)
	}
}

// TestRebalanceBoundSkipsOnlyHopelessSearches checks the shortcut that
// skips the search when UB2 rules out a gain of MinGain: where it fires,
// the full search finds nothing that pays either, and a map far below the
// bound is still searched.
func TestRebalanceBoundSkipsOnlyHopelessSearches(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	skipped, searched := 0, 0
	for trial := 0; trial < 12; trial++ {
		m := smallModel(t, 10+rng.IntN(30))
		nodes := randomNodes(rng, 6+rng.IntN(10))
		f := mustFleet(t, m, nodes)
		pl := NewPlanner()
		plan, err := pl.Full(f, 1)
		if err != nil {
			continue
		}
		for _, cur := range []LayerMap{plan.Map, thinned(f, plan.Map)} {
			rb, err := pl.Rebalance(f, cur, RebalanceOptions{})
			if err != nil {
				t.Fatal(err)
			}
			bound := f.UB2() < 1.10*f.Flow(cur)
			if !bound {
				searched++
				continue
			}
			skipped++
			if !strings.HasPrefix(rb.Reason, "no map can gain") {
				t.Fatalf("trial %d: searched although UB2 %.1f < 1.1 × flow %.1f: %s", trial, f.UB2(), f.Flow(cur), rb.Reason)
			}
			if rb.Move {
				t.Fatalf("trial %d: moved although UB2 %.1f < 1.1 × flow %.1f", trial, f.UB2(), f.Flow(cur))
			}
			// The search it skipped: no map of these nodes gains 10%.
			if best, err := pl.Full(f, 2); err == nil && best.Flow > 1.10*f.Flow(cur) {
				t.Fatalf("trial %d: skipped a search that finds %.1f over %.1f", trial, best.Flow, f.Flow(cur))
			}
		}
	}
	if skipped == 0 || searched == 0 {
		t.Fatalf("cases: %d skipped, %d searched; want both", skipped, searched)
	}
}

// thinned is m with its first node's range cut to one layer where the
// others still cover the rest, or m when none can be cut: a map well
// below the bound.
func thinned(f *Fleet, m LayerMap) LayerMap {
	for _, st := range m.Stages {
		if st.Range.Len() < 2 {
			continue
		}
		cut := m.With(st.Node, Range{Start: st.Range.Start, End: st.Range.Start + 1})
		if cut.Covers() {
			return cut
		}
	}
	return m
}
