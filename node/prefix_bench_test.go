package node

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/swarm"
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
	// Long prefills on a shared machine delay heartbeats: the liveness
	// bounds are generous, so that a slow turn is not a dead peer.
	c := newTestCluster(b, WithStaticMap(m), WithLogger(nil), WithModelFile(model), WithPrefixCache(cache),
		WithStepTimeout(60*time.Second), WithSwarmOptions(swarm.WithLiveness(10*time.Second, 30*time.Second, 30*time.Second)))
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

// BenchmarkPrefixRightAfter (issue 32): the same 900-token prompt sent 5
// times back to back through a 3-node swarm on loopback (12 layers 256
// wide; layers [6,12) held twice, so two equal paths share the first
// hop), a fresh prompt per iteration. Reported: the share of requests 2–5
// that resumed from the prefix cache on every hop without a replay, and
// their mean TTFT against the cold first's; the first iteration's TTFTs
// are logged.
func BenchmarkPrefixRightAfter(b *testing.B) {
	c := engine.DefaultGenConfig()
	c.Layers, c.Dim, c.Heads, c.KVHeads, c.FFN, c.Vocab, c.Seed = 12, 256, 8, 4, 768, 512, 17
	model := filepath.Join(b.TempDir(), "m12.gguf")
	if err := engine.GenerateFile(model, c); err != nil {
		b.Fatal(err)
	}
	dirs, ids := staticIDs(b, 3)
	m, err := layers.NewLayerMap(12, 1,
		layers.Stage{Node: ids[0].String(), Range: layers.Range{Start: 0, End: 6}},
		layers.Stage{Node: ids[1].String(), Range: layers.Range{Start: 6, End: 12}},
		layers.Stage{Node: ids[2].String(), Range: layers.Range{Start: 6, End: 12}})
	if err != nil {
		b.Fatal(err)
	}
	cl := newTestCluster(b, WithStaticMap(m), WithLogger(nil), WithModelFile(model),
		WithStepTimeout(60*time.Second), WithSwarmOptions(swarm.WithLiveness(10*time.Second, 30*time.Second, 30*time.Second)))
	var nodes []*Node
	for i := range 3 {
		nodes = append(nodes, cl.add(WithDataDir(dirs[i])))
	}
	cl.waitServing(20*time.Second, ids...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	reused := func() uint64 {
		var n uint64
		for _, nd := range nodes {
			st, err := nd.svc.sched.sync(ctx)
			if err != nil {
				b.Fatal(err)
			}
			n += st.PrefixTokens
		}
		return n
	}
	rng := rand.New(rand.NewPCG(9, 32))
	const prompt, repeats = 900, 5
	var hits, warm int
	var coldT, warmT time.Duration
	b.ResetTimer()
	for it := range b.N {
		p := randomTokens(rng, prompt, 512)
		var seq []string
		for i := range repeats {
			before := reused()
			res, err := nodes[0].Complete(ctx, Request{Tokens: p, MaxTokens: 8})
			if err != nil {
				b.Fatal(err)
			}
			// Two hops, each resuming every whole block but the last
			// position's.
			hit := len(res.Paths) == 1 && reused()-before == 2*(prompt-1)/prefixBlock*prefixBlock
			seq = append(seq, fmt.Sprintf("%v (hit %v)", res.TTFT.Round(time.Millisecond), hit))
			if i == 0 {
				coldT += res.TTFT
				continue
			}
			warm++
			warmT += res.TTFT
			if hit {
				hits++
			}
		}
		if it == 0 {
			b.Logf("TTFTs: %s", strings.Join(seq, ", "))
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(hits)/float64(warm), "hit_share")
	b.ReportMetric(float64(coldT.Microseconds())/1e3/float64(b.N), "cold_ttft_ms")
	b.ReportMetric(float64(warmT.Microseconds())/1e3/float64(warm), "repeat_ttft_ms")
}
