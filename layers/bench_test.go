package layers

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchFleet is n nodes drawn from the device table, on 1 Gbit links, for
// Llama-3-70B.
func benchFleet(b *testing.B, n int) *Fleet {
	m, _ := Model("llama-3-70b")
	rng := rand.New(rand.NewPCG(uint64(n), 1))
	devs := DeviceNames()
	nodes := make([]Node, n)
	for i := range nodes {
		h, _ := Device(devs[rng.IntN(len(devs))])
		h.NetBandwidth = Gbit * float64(1+rng.IntN(10))
		nodes[i] = Node{ID: fmt.Sprintf("n%04d", i), Hardware: h}
	}
	f, err := NewFleet(m, nodes, DefaultCostParams())
	if err != nil {
		b.Fatal(err)
	}
	return f
}

func BenchmarkFullPlan100(b *testing.B)  { benchFull(b, 100) }
func BenchmarkFullPlan1000(b *testing.B) { benchFull(b, 1000) }

func benchFull(b *testing.B, n int) {
	f := benchFleet(b, n)
	var p Plan
	for b.Loop() {
		p, _ = NewPlanner().Full(f, 1)
	}
	b.ReportMetric(p.Flow/f.UB(), "flow/UB")
}

func BenchmarkJoin1000(b *testing.B) {
	f := benchFleet(b, 1000)
	p, err := NewPlanner().Full(f, 1)
	if err != nil {
		b.Fatal(err)
	}
	joiner := f.Profiles[500].Node.ID
	m := p.Map.Without(joiner)
	pl := NewPlanner()
	for b.Loop() {
		if _, err := pl.Join(f, m, joiner); err != nil {
			b.Fatal(err)
		}
	}
}
