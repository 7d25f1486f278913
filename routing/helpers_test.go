package routing

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stratanet/strata/layers"
)

var testNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func mustModel(t testing.TB, name string) layers.ModelSpec {
	t.Helper()
	m, err := layers.Model(name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mustDevice(t testing.TB, name string) layers.Hardware {
	t.Helper()
	h, err := layers.Device(name)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// newRouter builds a router for llama-3-70b (80 layers) unless opts set a
// model.
func newRouter(t testing.TB, opts ...Option) *Router {
	t.Helper()
	r, err := New(append([]Option{WithModel(mustModel(t, "llama-3-70b"))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func stage(node string, from, to int) layers.Stage {
	return layers.Stage{Node: node, Range: layers.Range{Start: from, End: to}}
}

func mustMap(t testing.TB, L int, stages ...layers.Stage) layers.LayerMap {
	t.Helper()
	m, err := layers.NewLayerMap(L, 1, stages...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// fresh is a healthy, idle node with fresh figures and room for any session.
func fresh(t testing.TB, id, device string) NodeState {
	return NodeState{ID: id, Hardware: mustDevice(t, device), FreeKV: 1 << 20, Updated: testNow}
}

func hops(p Path) string { return p.String() }

// checkPath asserts that p chains over [0, L) on nodes that hold the layers.
func checkPath(t testing.TB, m layers.LayerMap, p Path) {
	t.Helper()
	if err := p.Validate(m.Layers); err != nil {
		t.Fatalf("path %v: %v", p, err)
	}
	for _, h := range p.Hops {
		r, ok := m.Range(h.Node)
		if !ok || r.Start > h.From || r.End < h.To {
			t.Fatalf("path %v: hop %v outside the node's range %v", p, h, r)
		}
	}
}

// swarm is a synthetic map and view: n nodes over L layers with ranges of
// 4–20 layers (a few chains lay a backbone so that every layer is held),
// mixed devices, some regions, measured links to a sample of peers, and
// random load, some of it stale.
func swarm(t testing.TB, n, L int, seed uint64, regions int) (layers.LayerMap, *View) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	devices := []string{"h100", "a100-80g", "l40s", "rtx5090", "rtx4090", "rtx3090", "t4"}
	var stages []layers.Stage
	id := func(i int) string { return fmt.Sprintf("n%05d", i) }
	kmin, kmax := min(4, L), min(20, L)
	span := func() int { return kmin + rng.IntN(kmax-kmin+1) }
	for i := 0; i < n; i++ {
		k := span()
		s := rng.IntN(L - k + 1)
		stages = append(stages, stage(id(i), s, s+k))
	}
	// Backbone: the first nodes tile [0, L) so coverage never fails.
	at, i := 0, 0
	for at < L && i < n {
		k := min(span(), L-at)
		stages[i] = stage(id(i), at, at+k)
		at += k
		i++
	}
	m := mustMap(t, L, stages...)
	v := NewView()
	for i := 0; i < n; i++ {
		ns := fresh(t, id(i), devices[rng.IntN(len(devices))])
		if regions > 0 {
			ns.Region = fmt.Sprintf("r%d", rng.IntN(regions))
		}
		ns.ActiveSessions = rng.IntN(64)
		ns.QueueDepth = max(rng.IntN(8)-6, 0) // sessions waiting for KV: rare
		ns.FreeKV = rng.IntN(1 << 16)
		if rng.IntN(2) == 0 {
			ns.LayerLatency = 1e-4 + rng.Float64()*1e-3
		}
		if rng.IntN(10) == 0 {
			ns.Updated = testNow.Add(-time.Minute)
		}
		if rng.IntN(20) == 0 {
			ns.Relayed = true
		}
		ns.Hardware.NetBandwidth = 1e8 + rng.Float64()*1e9
		v.Set(ns)
	}
	v.Set(fresh(t, "entry", "h100"))
	for i := 0; i < n; i++ {
		for range 8 {
			j := rng.IntN(n)
			if j != i {
				v.SetRTT(id(i), id(j), 1e-3+rng.Float64()*0.15)
			}
		}
	}
	for range min(32, n) {
		v.SetRTT("entry", id(rng.IntN(n)), 1e-3+rng.Float64()*0.1)
	}
	return m, v
}
