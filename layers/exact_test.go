package layers

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// Swarms of like nodes: the exact search visits one of each set of
// placements that differ only by swapping twins, and still finds the
// exhaustive optimum.
func TestExactSearchTwins(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 3))
	for trial := range 30 {
		L := 3 + rng.IntN(4)
		kinds := randomNodes(rng, 1+rng.IntN(2))
		var nodes []Node
		for i := range 3 + rng.IntN(2) {
			n := kinds[rng.IntN(len(kinds))]
			n.ID = fmt.Sprintf("n%03d", i)
			nodes = append(nodes, n)
		}
		f := mustFleet(t, smallModel(t, L), nodes)
		R := 1 + trial%2 // every layer on one node, or on two
		opt, _ := bruteForce(f, R)
		ex, ok := exactSearch(f, R, 0, 10_000_000)
		if !ok {
			t.Fatalf("trial %d: the search ran out of budget", trial)
		}
		got := 0.0
		if ex != nil {
			got = ex.minFlow()
		}
		if opt < 0 { // no placement meets the floor
			opt = 0
		}
		if got < opt*(1-1e-9) || got > opt*(1+1e-9) {
			t.Errorf("trial %d: %d nodes, %d layers, floor %d: exact search %v, exhaustive optimum %v", trial, len(nodes), L, R, got, opt)
		}
	}
}

// Six like nodes on eight layers, three each, as a test swarm is: the
// search finishes well within the planner's budget. Visiting every
// permutation, it ran past 2,000,000 nodes and fell back to the
// heuristic, and the leader spent about 0.3 s of CPU per plan on it.
func TestExactSearchLikeNodesFinish(t *testing.T) {
	h, err := Device("l40s")
	if err != nil {
		t.Fatal(err)
	}
	var nodes []Node
	for i := range 6 {
		nodes = append(nodes, Node{ID: fmt.Sprintf("n%d", i), Hardware: h, MaxLayers: 3})
	}
	f := mustFleet(t, smallModel(t, 8), nodes)
	for R := 1; R <= 2; R++ {
		if _, ok := exactSearch(f, R, 0, 500_000); !ok {
			t.Errorf("floor %d: the search ran out of its budget of 500,000", R)
		}
	}
}
