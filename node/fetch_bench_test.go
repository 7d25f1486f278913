package node

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/swarm"
	"github.com/stratanet/strata/swarm/chunks"
)

// BenchmarkUploaderLatency: the per-token latency of a node serving the
// whole model while a peer fetches the model's chunks from it in a loop,
// with no upload cap and with caps, against the same node idle. The modes
// take turns within each iteration, so that drift of the machine's load
// falls on all of them alike. Reported per mode: ns/token, the ratio to
// idle (x_idle; the goal is at most 1.10 under a cap) and the MB/s the
// peer got.
func BenchmarkUploaderLatency(b *testing.B) {
	const perTurn, maxTokens = 2, 16
	// A model wider than the tests' (256 wide, about 20 MB), so that a
	// token costs compute as a real one does and not only hand-offs.
	cfg := engine.DefaultGenConfig()
	cfg.Layers, cfg.Dim, cfg.FFN, cfg.Seed = 8, 256, 640, 9
	path := filepath.Join(b.TempDir(), "wide.gguf")
	if err := engine.GenerateFile(path, cfg); err != nil {
		b.Fatal(err)
	}
	c := newTestCluster(b, WithChunkSize(chunks.MinChunkSize), WithLogger(nil))
	n := c.add(WithModelFile(path))
	c.waitServing(30*time.Second, n.ID())
	man, err := chunks.BuildFile(path, chunks.WithChunkSize(chunks.MinChunkSize))
	if err != nil {
		b.Fatal(err)
	}
	all := make([]int, man.NumChunks())
	for i := range all {
		all[i] = i
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	h, err := swarm.New(ctx, swarm.WithListenAddrs("/ip4/127.0.0.1/tcp/0"), swarm.WithDiscovery(false))
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	if err := h.Libp2p().Connect(ctx, n.Host().AddrInfo()); err != nil {
		b.Fatal(err)
	}
	gen := func() int {
		res, err := n.Complete(ctx, Request{Prompt: benchPrompt, MaxTokens: maxTokens, Sampling: greedy})
		if err != nil {
			b.Fatal(err)
		}
		return len(res.Tokens)
	}
	for range 20 { // warm-up
		gen()
	}
	type mode struct {
		name   string
		fetch  bool
		rate   int64
		took   time.Duration
		tokens int
		bytes  int64
	}
	modes := []*mode{{name: "idle"}, {name: "uncapped", fetch: true}, {name: "cap20MBps", fetch: true, rate: 20e6},
		{name: "cap5MBps", fetch: true, rate: 5e6}}
	b.ResetTimer()
	for range b.N {
		for _, m := range modes {
			n.chunks.SetUploadRate(m.rate)
			fctx, stop := context.WithCancel(ctx)
			var got atomic.Int64
			var wg sync.WaitGroup
			if m.fetch {
				f := chunks.NewFetcher(h.Libp2p(), man)
				wg.Go(func() {
					for fctx.Err() == nil {
						f.Fetch(fctx, all, []peer.ID{n.ID()}, func(_ int, data []byte) error { //nolint:errcheck // ends with fctx
							got.Add(int64(len(data)))
							return nil
						})
					}
				})
			}
			start := time.Now()
			for range perTurn {
				m.tokens += gen()
			}
			m.took += time.Since(start)
			stop()
			wg.Wait()
			m.bytes += got.Load()
		}
	}
	b.StopTimer()
	n.chunks.SetUploadRate(0)
	idle := modes[0].took.Seconds() / float64(max(modes[0].tokens, 1))
	for _, m := range modes {
		per := m.took.Seconds() / float64(max(m.tokens, 1))
		b.ReportMetric(per*1e9, m.name+"_ns/token")
		if m.fetch {
			b.ReportMetric(per/idle, m.name+"_x_idle")
			b.ReportMetric(float64(m.bytes)/1e6/m.took.Seconds(), m.name+"_MB/s")
		}
	}
}
