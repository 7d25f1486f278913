package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/layers"
)

const benchPrompt = "Once upon a time"

// decodeSingle is the per-token decode time of the single-process
// pipeline cut at cuts (nil: one stage), over tokens tokens.
func decodeSingle(b *testing.B, cuts []int, tokens int) time.Duration {
	p, err := engine.OpenPipeline(testModel(b), cuts, engine.WithThreads(1))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	tok, _ := engine.LoadTokenizer(testModel(b))
	ids := tok.Encode(benchPrompt, true, false)
	best := time.Duration(1<<63 - 1)
	for range 3 {
		s, err := p.NewSession(len(ids) + tokens)
		if err != nil {
			b.Fatal(err)
		}
		var first time.Time
		n := 0
		if _, err := s.Generate(context.Background(), ids, tokens, engine.SamplingParams{}, nil, func(int32) {
			if n == 0 {
				first = time.Now()
			}
			n++
		}); err != nil {
			b.Fatal(err)
		}
		best = min(best, time.Since(first)/time.Duration(max(n-1, 1)))
		s.Close()
	}
	return best
}

// BenchmarkHops: decode latency per token through 1, 2 and 4 hops on
// loopback, each hop a node of its own and the entry a node with no
// layers (so every hop is a network crossing), against the single
// process in the same run. Reported: ns per token, the ratio to the
// single process, and the time added per hop.
func BenchmarkHops(b *testing.B) {
	const perGen = 128
	single := decodeSingle(b, nil, perGen)
	split := decodeSingle(b, []int{0, 1, 2, 3, 4, 5, 6, 7, 8}, perGen)
	b.Run("single", func(b *testing.B) {
		b.ReportMetric(float64(single.Nanoseconds()), "ns/token")
		b.ReportMetric(1/single.Seconds(), "tok/s")
		b.ReportMetric(1, "x_single")
	})
	// The same process with one engine stage per layer, as a node holds
	// its layers: what the per-layer calls cost without any network.
	b.Run("single-per-layer", func(b *testing.B) {
		b.ReportMetric(float64(split.Nanoseconds()), "ns/token")
		b.ReportMetric(split.Seconds()/single.Seconds(), "x_single")
	})
	for _, hops := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("hops=%d", hops), func(b *testing.B) {
			dirs, ids := staticIDs(b, hops+1)
			var stages []layers.Stage
			per := 8 / hops
			for i := range hops {
				stages = append(stages, layers.Stage{Node: ids[i+1].String(), Range: layers.Range{Start: i * per, End: (i + 1) * per}})
			}
			m, err := layers.NewLayerMap(8, 1, stages...)
			if err != nil {
				b.Fatal(err)
			}
			c := newTestCluster(b, WithStaticMap(m), WithLogger(nil))
			var nodes []*Node
			for i := range hops + 1 {
				nodes = append(nodes, c.add(WithDataDir(dirs[i])))
			}
			c.waitServing(10*time.Second, ids[1:]...)
			entry := nodes[0]
			ctx := context.Background()
			// Warm the streams.
			if _, err := entry.Complete(ctx, Request{Prompt: benchPrompt, MaxTokens: 8}); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			var decode time.Duration
			tokens := 0
			for left := b.N; left > 0; {
				n := min(left, perGen)
				res, err := entry.Complete(ctx, Request{Prompt: benchPrompt, MaxTokens: n + 1})
				if err != nil {
					b.Fatal(err)
				}
				decode += res.Total - res.TTFT
				tokens += len(res.Tokens) - 1
				left -= n
			}
			b.StopTimer()
			perTok := decode / time.Duration(max(tokens, 1))
			b.ReportMetric(float64(perTok.Nanoseconds()), "ns/token")
			b.ReportMetric(1/perTok.Seconds(), "tok/s")
			b.ReportMetric(perTok.Seconds()/single.Seconds(), "x_single")
			b.ReportMetric((perTok-single).Seconds()*1e3/float64(hops), "ms_added/hop")
		})
	}
}

// BenchmarkRefusal: how long Generate takes to refuse a request it
// cannot serve (a bad sampling request, refused before tokenizing; a
// generation beyond the context, refused after), against tokenizing the
// same prompt in the same run. The tests only check that a refusal
// waits for nothing; its latency is measured here.
func BenchmarkRefusal(b *testing.B) {
	n := oneNode(b)
	tok := n.model.tok
	const prompt = "Once upon a time there was a"
	start := time.Now()
	const encodes = 1000
	for range encodes {
		tok.Encode(prompt, true, false)
	}
	encode := time.Since(start) / encodes
	ctx := context.Background()
	for _, c := range []struct {
		name string
		req  Request
	}{
		{"bad-request", Request{Prompt: prompt, MaxTokens: -1}},
		{"too-long", Request{Prompt: prompt, MaxTokens: 1 << 20}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := n.Generate(ctx, c.req); err == nil {
					b.Fatal("accepted")
				}
			}
			per := b.Elapsed() / time.Duration(b.N)
			b.ReportMetric(float64(per.Nanoseconds()), "ns/refusal")
			b.ReportMetric(float64(per)/float64(encode), "x_encode")
		})
	}
}
