package routing

import (
	"runtime"
	"testing"
)

// measure runs f b.N times and reports the thread's CPU time per call next
// to the wall time (see threadCPU).
func measure(b *testing.B, f func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	t0 := threadCPU()
	for b.Loop() {
		f()
	}
	if t1 := threadCPU(); t0 >= 0 && t1 >= 0 {
		b.ReportMetric(float64(t1-t0)/float64(b.N), "cpu-ns/op")
	}
}

// benchRoute routes one request per iteration on a synthetic swarm of n
// nodes over 80 layers (ranges of 4–20 layers, 8 regions, 8 measured
// links per node, 32 from the entry, mixed devices and load), with a fresh
// seed each time.
func benchRoute(b *testing.B, n int) {
	r := newRouter(b)
	m, v := swarm(b, n, 80, 42, 8)
	req := Request{Entry: "entry", PromptTokens: 300, MaxTokens: 256}
	if _, err := r.Route(m, v, req, testNow); err != nil {
		b.Fatal(err)
	}
	seed := uint64(0)
	measure(b, func() {
		req.Seed = seed
		seed++
		if _, err := r.Route(m, v, req, testNow); err != nil {
			b.Fatal(err)
		}
	})
}

func BenchmarkRoute1000x80(b *testing.B) { benchRoute(b, 1000) }
func BenchmarkRoute100x80(b *testing.B)  { benchRoute(b, 100) }

// The k-best API at 100 nodes, for comparison with one route.
func BenchmarkPaths4x100x80(b *testing.B) {
	r := newRouter(b)
	m, v := swarm(b, 100, 80, 42, 8)
	req := Request{Entry: "entry", PromptTokens: 300, MaxTokens: 256}
	measure(b, func() {
		if _, err := r.Paths(m, v, req, testNow, 4); err != nil {
			b.Fatal(err)
		}
	})
}
