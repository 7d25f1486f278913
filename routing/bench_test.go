package routing

import (
	"fmt"
	"os"
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

// benchProfile is benchRoute through a profile of the example config: the
// cost of the plugins on top of the router's own. Every node holds a
// summary of 200 cached blocks, half of them the request's 16-block prefix.
func benchProfile(b *testing.B, name string, opts ...Option) {
	src, err := os.ReadFile("testdata/scheduler/example.yaml")
	if err != nil {
		b.Fatal(err)
	}
	c, err := ParseSchedulerConfig(src)
	if err != nil {
		b.Fatal(err)
	}
	ps, err := NewProfiles(c, append([]Option{WithModel(mustModel(b, "llama-3-70b"))}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	pol, err := ps.For(name)
	if err != nil {
		b.Fatal(err)
	}
	m, v := swarm(b, 1000, 80, 42, 8)
	prefix := BlockHashes(seq(0, 64*16), 64)
	for i := range 1000 {
		s := NewPrefixSummary(DefaultSummaryBits)
		s.Add(BlockHashes(seq(1<<20+i*64*200, 64*200), 64)...)
		if i%2 == 0 {
			s.Add(prefix...)
		}
		v.Update(fmt.Sprintf("n%05d", i), func(n *NodeState) { n.Prefixes = s })
	}
	req := Request{Entry: "entry", PromptTokens: 64 * 16, MaxTokens: 256, Prefix: prefix}
	seed := uint64(0)
	measure(b, func() {
		req.Seed = seed
		seed++
		if _, err := pol.Route(m, v, req, testNow); err != nil {
			b.Fatal(err)
		}
	})
}

func BenchmarkProfileInteractive1000x80(b *testing.B) { benchProfile(b, "interactive") }
func BenchmarkProfileChat1000x80(b *testing.B)        { benchProfile(b, "chat") }

// The same with per-plugin timing on the wall clock, as a node runs it:
// the cost of WithObserver against BenchmarkProfile*1000x80.
func BenchmarkProfileInteractive1000x80Observed(b *testing.B) {
	benchProfile(b, "interactive", WithObserver(newWallObserver()))
}
func BenchmarkProfileChat1000x80Observed(b *testing.B) {
	benchProfile(b, "chat", WithObserver(newWallObserver()))
}
