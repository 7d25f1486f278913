package node

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/engine"
)

// TestFailoverKillFamilies is TestFailoverKillMiddleHop on the families
// beyond the dense ones (deepseek2, a Mixtral-style llama, gemma2, gemma3,
// qwen3moe, gpt-oss), each in F32, Q8_0 and Q4_K_M, and gpt-oss in
// MXFP4 too: four generations (two greedy, two sampled)
// through 3-hop paths, the busiest middle hop hard-closed when every
// generation has a quarter of its tokens; every generation replays and
// ends with exactly the single-process run's tokens. (The kill -9 of a
// real process under load is testdata/testnet/churn-3-{deepseek2,
// mixtral,gemma2}*.yaml, run by make soak.)
func TestFailoverKillFamilies(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nine swarms of six nodes")
	}
	shapes := map[string]engine.GenConfig{
		// Dim 256: the K-quants' rows are 256 wide.
		"deepseek2": {Arch: "deepseek2", Layers: 8, Dim: 256, Heads: 4, FFN: 512, Vocab: 512, Seed: 31,
			Experts: 8, ExpertsUsed: 2, ExpertFFN: 256, DeepSeek2: engine.DeepSeek2Gen{KVLoraRank: 256, ExpertGroups: 4, GroupsUsed: 2}},
		"mixtral": {Arch: "llama", Layers: 8, Dim: 256, Heads: 8, KVHeads: 2, FFN: 256, Vocab: 512, Seed: 32, Experts: 8, ExpertsUsed: 2},
		"gemma2":  {Arch: "gemma2", Layers: 8, Dim: 256, Heads: 4, KVHeads: 2, HeadDim: 64, FFN: 512, Vocab: 512, Seed: 33, SlidingWindow: 8},
		"gemma3":  {Arch: "gemma3", Layers: 8, Dim: 256, Heads: 4, KVHeads: 2, HeadDim: 64, FFN: 512, Vocab: 512, Seed: 34, SlidingWindow: 8},
		"qwen3moe": {Arch: "qwen3moe", Layers: 8, Dim: 256, Heads: 4, KVHeads: 2, FFN: 512, Vocab: 512, Seed: 35,
			Experts: 8, ExpertsUsed: 2, ExpertFFN: 256},
		"gpt-oss": {Arch: "gpt-oss", Layers: 8, Dim: 256, Heads: 4, KVHeads: 2, FFN: 512, Vocab: 512, Seed: 36,
			Experts: 8, ExpertsUsed: 2, ExpertFFN: 256},
	}
	dir := t.TempDir()
	for _, name := range []string{"deepseek2", "mixtral", "gemma2", "gemma3", "qwen3moe", "gpt-oss"} {
		qs := []string{"f32", "q8_0", "q4_k_m"}
		if name == "gpt-oss" {
			qs = append(qs, "mxfp4_moe")
		}
		for _, q := range qs {
			t.Run(name+"/"+q, func(t *testing.T) {
				// Each swarm mostly waits (elections, heartbeats): two at a
				// time halve the wall time.
				t.Parallel()
				c := shapes[name]
				if q == "q4_k_m" || q == "mxfp4_moe" {
					c.Mix = q
				} else {
					dt, err := engine.ParseDType(q)
					if err != nil {
						t.Fatal(err)
					}
					c.DType = dt
				}
				path := filepath.Join(dir, fmt.Sprintf("%s-%s.gguf", name, q))
				if err := engine.GenerateFile(path, c); err != nil {
					t.Fatal(err)
				}
				killMiddleHopOn(t, path)
			})
		}
	}
}

func killMiddleHopOn(t *testing.T, path string) {
	c := newTestCluster(t, WithModelFile(path), WithMaxLayers(3), WithStepTimeout(10*time.Minute))
	var ids []peer.ID
	for range 6 {
		ids = append(ids, c.add().ID())
	}
	c.waitServing(60*time.Second, ids...)
	entries, middles := roles(t, c)

	const maxTokens = 48
	prompts := []string{"Once upon a time", "The quick brown fox"}
	var runs []*genRun
	for i := range 4 {
		sp := engine.SamplingParams{}
		if i%2 == 1 {
			sp = engine.SamplingParams{Temperature: 0.8, TopP: 0.9, Seed: uint64(200 + i)}
		}
		r := &genRun{prompt: prompts[i/2], sp: sp, entry: entries[i%len(entries)]}
		r.want = referenceOf(t, path, r.prompt, maxTokens, sp)
		runs = append(runs, r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	wg := startRuns(ctx, t, runs, maxTokens)
	waitFor(t, 60*time.Second, "a quarter of every generation", func() bool {
		for _, r := range runs {
			if int(r.count.Load()) < maxTokens/4 && int(r.count.Load()) < len(r.want) {
				return false
			}
		}
		return true
	})
	victim, use := busiest(entries, middles)
	var before []int
	for _, r := range runs {
		before = append(before, int(r.count.Load()))
	}
	victim.Kill()
	t.Logf("killed middle hop %s (on %d running paths) at tokens %v", shortID(victim.ID()), use, before)
	wg.Wait()
	replays := 0
	for i, r := range runs {
		if r.err != nil {
			t.Fatalf("generation %d: %v", i, r.err)
		}
		if !slices.Equal(r.got, r.want) {
			t.Fatalf("generation %d (%q, %+v):\n swarm %v\nsingle %v", i, r.prompt, r.sp, r.got, r.want)
		}
		replays += r.result.Replays
	}
	// A generation within a token of its end (an early end of text) may
	// still be listed on the victim's path, but its last step can have
	// passed the victim already: it may have nothing to replay.
	done := 0
	var lens []int
	for i, r := range runs {
		lens = append(lens, len(r.want))
		if before[i] >= len(r.want)-1 {
			done++
		}
	}
	if replays == 0 || replays < use-done {
		t.Fatalf("%d replays, %d running paths used the victim (tokens at the kill %v of %v): the kill interrupted nothing", replays, use, before, lens)
	}
	t.Logf("all %d generations match the single-process run after %d replays", len(runs), replays)
}
