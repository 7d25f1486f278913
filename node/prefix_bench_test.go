package node

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/layers"
)

// chatModel is a model wide enough that a prefill's compute, not the
// loopback round trips, makes up a turn's time to first token: 8 layers
// 256 wide.
func chatModel(b *testing.B) string {
	b.Helper()
	c := engine.DefaultGenConfig()
	c.Layers, c.Dim, c.Heads, c.KVHeads, c.FFN, c.Vocab, c.Seed = 8, 256, 8, 4, 768, 512, 17
	path := filepath.Join(b.TempDir(), "chat.gguf")
	if err := engine.GenerateFile(path, c); err != nil {
		b.Fatal(err)
	}
	return path
}

// chatSwarm starts three nodes on loopback holding layers [0,3), [3,6)
// and [6,8) of model under a static map, the prefix cache on or off, and
// returns them, the first (which holds layer 0) being the entry.
func chatSwarm(b *testing.B, model string, cache bool) []*Node {
	dirs, ids := staticIDs(b, 3)
	cuts := []int{0, 3, 6, 8}
	var stages []layers.Stage
	for i := range 3 {
		stages = append(stages, layers.Stage{Node: ids[i].String(), Range: layers.Range{Start: cuts[i], End: cuts[i+1]}})
	}
	m, err := layers.NewLayerMap(8, 1, stages...)
	if err != nil {
		b.Fatal(err)
	}
	c := newTestCluster(b, WithStaticMap(m), WithLogger(nil), WithModelFile(model), WithPrefixCache(cache),
		WithStepTimeout(60*time.Second))
	var nodes []*Node
	for i := range 3 {
		nodes = append(nodes, c.add(WithDataDir(dirs[i])))
	}
	c.waitServing(20*time.Second, ids...)
	return nodes
}

// chatTurn is what one turn of the chat measured.
type chatTurn struct {
	ttft    time.Duration
	prefill int // positions the first hop computed for the prompt
	tokens  []int32
}

// runChat plays a 4-turn chat through entry, each turn re-sending the
// whole history (the previous turns, their answers and a new user
// message), and measures each turn.
func runChat(b *testing.B, nodes []*Node, turns [][]int32, answer int) []chatTurn {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out []chatTurn
	var hist []int32
	for _, user := range turns {
		hist = append(hist, user...)
		before := nodes[0].Metrics().PrefixTokens
		res, err := nodes[0].Complete(ctx, Request{Tokens: hist, MaxTokens: answer, Sampling: engine.SamplingParams{}})
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Paths) != 1 {
			b.Fatalf("turn took %d paths: %v", len(res.Paths), res.Paths)
		}
		reused := int(nodes[0].Metrics().PrefixTokens - before)
		out = append(out, chatTurn{ttft: res.TTFT, prefill: len(hist) - reused, tokens: res.Tokens})
		hist = append(hist, res.Tokens...)
	}
	return out
}

// BenchmarkPrefixCacheChat: a 4-turn chat through a 3-node swarm on
// loopback (real libp2p, a 3-hop path), each turn re-sending the whole
// history, with each stage's prefix cache against without it, in the same
// run. Reported per turn: time to first token and the prompt positions
// the first hop computed, with and without, and the TTFT ratio; the
// answers must be identical.
func BenchmarkPrefixCacheChat(b *testing.B) {
	const answer = 16
	model := chatModel(b)
	warm := chatSwarm(b, model, true)
	cold := chatSwarm(b, model, false)
	vocab := warm[0].model.info.Vocab
	rng := rand.New(rand.NewPCG(7, 8))
	const nTurns = 4
	sum := map[bool][]time.Duration{true: make([]time.Duration, nTurns), false: make([]time.Duration, nTurns)}
	prefill := map[bool][]int{true: make([]int, nTurns), false: make([]int, nTurns)}
	// Warm the streams and the engines with one conversation, unmeasured.
	w0 := [][]int32{randomTokens(rng, 40, vocab), randomTokens(rng, 8, vocab)}
	runChat(b, warm, w0, 4)
	runChat(b, cold, w0, 4)
	b.ResetTimer()
	for range b.N {
		// A fresh conversation per iteration: a 200-token system prompt
		// and first message, then 60-token messages.
		turns := [][]int32{randomTokens(rng, 200, vocab)}
		for range nTurns - 1 {
			turns = append(turns, randomTokens(rng, 60, vocab))
		}
		w := runChat(b, warm, turns, answer)
		c := runChat(b, cold, turns, answer)
		for i := range nTurns {
			if !slices.Equal(w[i].tokens, c[i].tokens) {
				b.Fatalf("turn %d: with the cache %v, without %v", i+1, w[i].tokens, c[i].tokens)
			}
			sum[true][i] += w[i].ttft
			sum[false][i] += c[i].ttft
			prefill[true][i] += w[i].prefill
			prefill[false][i] += c[i].prefill
		}
	}
	b.StopTimer()
	for i := 1; i < nTurns; i++ {
		wt := sum[true][i] / time.Duration(b.N)
		ct := sum[false][i] / time.Duration(b.N)
		b.ReportMetric(float64(wt.Microseconds())/1e3, fmt.Sprintf("turn%d_ttft_cache_ms", i+1))
		b.ReportMetric(float64(ct.Microseconds())/1e3, fmt.Sprintf("turn%d_ttft_nocache_ms", i+1))
		b.ReportMetric(ct.Seconds()/wt.Seconds(), fmt.Sprintf("turn%d_ttft_x", i+1))
		b.ReportMetric(float64(prefill[true][i])/float64(b.N), fmt.Sprintf("turn%d_prefill_cache", i+1))
		b.ReportMetric(float64(prefill[false][i])/float64(b.N), fmt.Sprintf("turn%d_prefill_nocache", i+1))
	}
}
