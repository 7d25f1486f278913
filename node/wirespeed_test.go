package node

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/layers"
)

// slowUplink paces a node's activation frames to rate bytes/s, one at a
// time, as a home uplink serialises them: a frame leaves when the ones
// before it have, and takes len/rate. Latency and TCP's dynamics are not
// modelled.
type slowUplink struct {
	inner actSender
	rate  float64

	mu   sync.Mutex
	free time.Time
}

func (s *slowUplink) SendActivation(ctx context.Context, to peer.ID, frame []byte) error {
	s.mu.Lock()
	now := time.Now()
	start := now
	if s.free.After(now) {
		start = s.free
	}
	s.free = start.Add(time.Duration(float64(len(frame)) / s.rate * float64(time.Second)))
	done := s.free
	s.mu.Unlock()
	t := time.NewTimer(time.Until(done))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.inner.SendActivation(ctx, to, frame)
}

// BenchmarkWireLink: time to first token and decode tokens/s of a long
// prompt over two real nodes on loopback whose activation uplinks are
// paced to 20 Mbit/s, one layer each of a model 1024 wide (a frame row is
// 4 KiB as f32, 1.1 KiB as q8), with f32, f16 and q8 on the wire.
//
//	go test ./node -run '^$' -bench WireLink -benchtime 3x
func BenchmarkWireLink(b *testing.B) {
	c := engine.DefaultGenConfig()
	c.Layers, c.Dim, c.Heads, c.KVHeads, c.FFN, c.Seed = 2, 1024, 8, 2, 64, 3
	path := filepath.Join(b.TempDir(), "wide.gguf")
	if err := engine.GenerateFile(path, c); err != nil {
		b.Fatal(err)
	}
	prompt := strings.Repeat("the cat sat on the mat and looked at the dog ", 70)
	const maxTokens, rate = 32, 20e6 / 8
	for _, mode := range []WireMode{WireF32, WireF16, WireQ8} {
		b.Run(string(mode), func(b *testing.B) {
			dirs, ids := staticIDs(b, 2)
			m, err := layers.NewLayerMap(2, 1, layers.Stage{Node: ids[0].String(), Range: layers.Range{Start: 0, End: 1}},
				layers.Stage{Node: ids[1].String(), Range: layers.Range{Start: 1, End: 2}})
			if err != nil {
				b.Fatal(err)
			}
			cl := newTestCluster(b, WithStaticMap(m), WithModelFile(path), WithWire(mode), WithStepTimeout(time.Minute),
				WithVerifyRate(0), WithPrefixCache(false))
			x := cl.add(WithDataDir(dirs[0]))
			y := cl.add(WithDataDir(dirs[1]))
			cl.waitServing(30*time.Second, x.ID(), y.ID())
			// Before any session: nothing sends activations yet.
			x.svc.acts = &slowUplink{inner: x.svc.acts, rate: rate}
			y.svc.acts = &slowUplink{inner: y.svc.acts, rate: rate}
			var ttft, decode time.Duration
			var toks, promptToks int
			run := func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				start := time.Now()
				s, err := x.Generate(ctx, Request{Prompt: prompt, MaxTokens: maxTokens, Sampling: engineGreedy()})
				if err != nil {
					b.Fatal(err)
				}
				var first, last time.Time
				n := 0
				for {
					d, err := s.Recv()
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
					if n == 0 {
						first = time.Now()
					}
					last = time.Now()
					n += len(d.Tokens)
				}
				promptToks = s.PromptTokens()
				ttft += first.Sub(start)
				decode += last.Sub(first)
				toks += n - 1
			}
			run() // warm: connections, buffers
			ttft, decode, toks = 0, 0, 0
			b.ResetTimer()
			for range b.N {
				run()
			}
			b.StopTimer()
			b.ReportMetric(float64(ttft.Milliseconds())/float64(b.N), "ttft_ms")
			b.ReportMetric(float64(toks)/decode.Seconds(), "decode_tok/s")
			b.ReportMetric(float64(promptToks), "prompt_tokens")
		})
	}
}
