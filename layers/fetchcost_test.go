package layers

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestFetchSeconds(t *testing.T) {
	mv := Move{Node: "a", LoadBytes: 6e9}
	rates := map[string]float64{"a": 100e6, "b": 0}
	if got := FetchSeconds(mv, rates); got != 60 {
		t.Fatalf("6 GB at 100 MB/s: %v s", got)
	}
	for _, c := range []struct {
		mv    Move
		rates map[string]float64
	}{
		{Move{Node: "c", LoadBytes: 6e9}, rates}, // has its file
		{Move{Node: "b", LoadBytes: 6e9}, rates}, // no rate measured
		{Move{Node: "a"}, rates},                 // loads nothing
		{mv, nil},
	} {
		if got := FetchSeconds(c.mv, c.rates); got != 0 {
			t.Fatalf("%+v: %v s", c.mv, got)
		}
	}
}

// TestRebalancePaysForFetchTime: a rebalance that pays without fetching
// does not when the moving nodes must fetch their layers over slow links,
// and is the same when their links are fast.
func TestRebalancePaysForFetchTime(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	checked := 0
	for trial := 0; trial < 20; trial++ {
		m := smallModel(t, 8+rng.IntN(24))
		nodes := randomNodes(rng, 6+rng.IntN(20))
		f := mustFleet(t, m, nodes)
		plan, err := NewPlanner().Full(f, 1)
		if err != nil {
			continue
		}
		for i := range nodes {
			nodes[i].Speed = 0.3 + 1.4*rng.Float64()
		}
		measured := mustFleet(t, m, nodes)
		rb, err := NewPlanner().Rebalance(measured, plan.Map, RebalanceOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !rb.Move || rb.FetchSeconds != 0 {
			continue
		}
		checked++
		rates := func(r float64) map[string]float64 {
			out := map[string]float64{}
			for _, n := range nodes {
				out[n.ID] = r
			}
			return out
		}
		fast, err := NewPlanner().Rebalance(measured, plan.Map, RebalanceOptions{FetchRates: rates(1e15)})
		if err != nil {
			t.Fatal(err)
		}
		if !fast.Move || !slices.Equal(fast.To.Stages, rb.To.Stages) {
			t.Fatalf("trial %d: fast links changed the decision: %s", trial, fast.Reason)
		}
		if !strings.Contains(fast.Reason, "fetching from peers") || fast.FetchSeconds <= 0 {
			t.Fatalf("trial %d: fetch time not reported: %q, %v s", trial, fast.Reason, fast.FetchSeconds)
		}
		// Slow enough that fetching takes hours.
		slow, err := NewPlanner().Rebalance(measured, plan.Map, RebalanceOptions{FetchRates: rates(rb.Bytes / 360000)})
		if err != nil {
			t.Fatal(err)
		}
		if slow.Move {
			t.Fatalf("trial %d: moved although fetching takes %.0f s: %s", trial, slow.FetchSeconds, slow.Reason)
		}
	}
	if checked == 0 {
		t.Fatal("no trial rebalanced: the test checks nothing")
	}
	t.Logf("%d trials checked", checked)
}
