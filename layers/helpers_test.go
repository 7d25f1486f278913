package layers

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// smallModel is a toy model with L layers, sized so that a GiB-scale
// device holds a handful of them.
func smallModel(t testing.TB, L int) ModelSpec {
	t.Helper()
	m, err := NewModelSpec(HyperParams{Name: fmt.Sprintf("toy-%d", L), Layers: L, Hidden: 2048, Heads: 16,
		KVHeads: 4, FFN: 8192, Vocab: 32000, BytesPerParam: 2})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// randomNodes draws n heterogeneous devices with random memory and speed.
func randomNodes(rng *rand.Rand, n int) []Node {
	nodes := make([]Node, n)
	for i := range nodes {
		nodes[i] = Node{ID: fmt.Sprintf("n%03d", i), Hardware: Hardware{
			Name:         "rand",
			MemoryBytes:  (0.6 + 4*rng.Float64()) * GiB,
			MemBandwidth: (100 + 900*rng.Float64()) * GB,
			TFLOPS:       10 + 200*rng.Float64(),
		}}
	}
	return nodes
}

func mustFleet(t testing.TB, m ModelSpec, nodes []Node) *Fleet {
	t.Helper()
	f, err := NewFleet(m, nodes, CostParams{Context: 1024, MaxBatch: 64})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// bruteForce enumerates every assignment of one contiguous range (or none)
// to every node and returns the best Flow among those meeting floor R. It
// shares no code with the planner's search.
func bruteForce(f *Fleet, R int) (float64, LayerMap) {
	L := f.Model.Layers
	N := f.Len()
	ranges := []Range{{}}
	for s := 0; s < L; s++ {
		for e := s + 1; e <= L; e++ {
			ranges = append(ranges, Range{s, e})
		}
	}
	best := -1.0
	var bestMap LayerMap
	cur := make([]Range, N)
	var rec func(i int)
	rec = func(i int) {
		if i == N {
			m := LayerMap{Layers: L}
			for j, r := range cur {
				if !r.Empty() {
					m.Stages = append(m.Stages, Stage{Node: f.Profiles[j].Node.ID, Range: r})
				}
			}
			if m.Replication() < R {
				return
			}
			if v := f.Flow(m); v > best {
				best, bestMap = v, m
			}
			return
		}
		for _, r := range ranges {
			if !r.Empty() && f.Profiles[i].TPS(r.Len(), EndsOf(r, L)) <= 0 {
				continue
			}
			cur[i] = r
			rec(i + 1)
		}
	}
	rec(0)
	return math.Max(best, 0), bestMap
}
