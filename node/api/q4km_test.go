package api

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/node"
)

// TestQ4KMSwarm: a 3-node swarm serves a Q4_K_M model made by model gen,
// as one file or split as llama-gguf-split writes it (each node opening
// the model through another part), through the API; its output equals
// what `strata generate` prints on one process from the single file.
func TestQ4KMSwarm(t *testing.T) {
	swarmMatchesSingleProcess(t, engine.GenConfig{Arch: "llama", Layers: 8, Dim: 256, Heads: 4, KVHeads: 2, FFN: 512, Vocab: 512, Seed: 21, Mix: "q4_k_m"})
}

// TestMoESwarm is TestQ4KMSwarm on a mixture of experts: a Q4_K_M qwen3moe
// file, 3 of 8 experts a token, its layers split between the nodes.
func TestMoESwarm(t *testing.T) {
	swarmMatchesSingleProcess(t, engine.GenConfig{Arch: "qwen3moe", Layers: 8, Dim: 256, Heads: 4, KVHeads: 2, HeadDim: 64, FFN: 768,
		Vocab: 512, Seed: 22, Mix: "q4_k_m", Experts: 8, ExpertsUsed: 3, ExpertFFN: 256})
}

// TestGptOssSwarm is TestQ4KMSwarm on gpt-oss: sinks, biases, its router
// and activation, YaRN, and a window of 8 on the even layers that the
// generation outgrows.
func TestGptOssSwarm(t *testing.T) {
	swarmMatchesSingleProcess(t, engine.GenConfig{Arch: "gpt-oss", Layers: 8, Dim: 256, Heads: 4, KVHeads: 2, HeadDim: 64, FFN: 256,
		Vocab: 512, Seed: 23, Mix: "q4_k_m", Experts: 8, ExpertsUsed: 2, SlidingWindow: 8, Context: 131072, RopeBase: 150000,
		RopeScaling: "yarn", RopeScalingFactor: 32, RopeOrigContext: 4096})
}

// TestDeepSeek2Swarm is TestQ4KMSwarm on deepseek2: latent attention
// (the cache holds the latent), a leading dense layer, then 8 experts in 4
// groups, 2 kept, 3 used, sigmoid routing with exp_probs_b, a shared
// expert, and YaRN with DeepSeek-V3's log multiplier.
func TestDeepSeek2Swarm(t *testing.T) {
	swarmMatchesSingleProcess(t, engine.GenConfig{Arch: "deepseek2", Layers: 8, Dim: 256, Heads: 4, FFN: 512, Vocab: 512, Seed: 24,
		Mix: "q4_k_m", Experts: 8, ExpertsUsed: 3, ExpertFFN: 256, Context: 4096, RopeScaling: "yarn", RopeScalingFactor: 40,
		DeepSeek2: engine.DeepSeek2Gen{QLoraRank: 256, KVLoraRank: 256, ExpertGroups: 4, GroupsUsed: 2}})
}

// TestGemma3Swarm is TestQ4KMSwarm on gemma3: a Q4_K_M file whose local
// layers' window (8) is shorter than the prompt and completion.
func TestGemma3Swarm(t *testing.T) {
	swarmMatchesSingleProcess(t, engine.GenConfig{Arch: "gemma3", Layers: 6, Dim: 256, Heads: 4, KVHeads: 2, HeadDim: 64, FFN: 512,
		Vocab: 512, Seed: 23, Mix: "q4_k_m", SlidingWindow: 8})
}

// swarmMatchesSingleProcess runs the model gc as one file and split on a
// 3-node swarm through the API and checks it against one process.
func swarmMatchesSingleProcess(t *testing.T, gc engine.GenConfig) {
	dir := t.TempDir()
	single, err := engine.GenerateFiles(filepath.Join(dir, "q4km.gguf"), gc, engine.FileLayout{})
	if err != nil {
		t.Fatal(err)
	}
	parts, err := engine.GenerateFiles(filepath.Join(dir, "q4km-split.gguf"), gc, engine.FileLayout{SplitMaxTensors: 16})
	if err != nil {
		t.Fatal(err)
	}
	f, fh, err := engine.OpenFile(single[0])
	if err != nil {
		t.Fatal(err)
	}
	types := map[engine.DType]int{}
	for _, ti := range f.Tensors {
		types[ti.Type]++
	}
	fh.Close()
	if types[engine.Q4_K] == 0 || types[engine.Q6_K] == 0 || len(parts) < 3 {
		t.Fatalf("types %v, %d parts: want a Q4_K_M mix in at least 3 parts", types, len(parts))
	}

	// reference is `strata generate --model single`: the pipeline in one
	// process, the prompt with BOS, the pieces of the non-end tokens.
	tok, err := engine.LoadTokenizer(single[0])
	if err != nil {
		t.Fatal(err)
	}
	reference := func(prompt string, maxTokens int, sp engine.SamplingParams) ([]int32, string) {
		p, err := engine.OpenPipeline(single[0], nil, engine.WithThreads(1))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		ids := tok.Encode(prompt, true, false)
		s, err := p.NewSession(len(ids) + maxTokens)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var text strings.Builder
		out, err := s.Generate(context.Background(), ids, maxTokens, sp, tok.IsEnd, func(id int32) {
			if !tok.IsEnd(id) {
				text.Write(tok.Piece(id))
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		return out, text.String()
	}

	const prompt, maxTokens = "Once upon a time", 24
	for _, layout := range []struct {
		name  string
		model func(i int) string
	}{
		{"file", func(int) string { return single[0] }},
		{"split", func(i int) string { return parts[(len(parts)-1-i)%len(parts)] }},
	} {
		t.Run(layout.name, func(t *testing.T) {
			c, err := newClusterEach(3, func(i int) []node.Option { return []node.Option{node.WithModelFile(layout.model(i))} })
			if err != nil {
				t.Fatal(err)
			}
			defer c.close()
			t.Logf("committed map: %v", c.nodes[0].Committed().Stages)
			for _, sp := range []map[string]any{
				{"temperature": 0},
				{"temperature": 0.9, "top_p": 0.95, "seed": 9},
			} {
				wantTokens, wantText := reference(prompt, maxTokens, samplingOf(sp))
				req := map[string]any{"model": c.nodes[0].Model().Name, "prompt": prompt, "max_tokens": maxTokens}
				for k, v := range sp {
					req[k] = v
				}
				for i, u := range c.urls {
					r := completion(t, u+"/v1/completions", req)
					if got := textOf(r); got != jsonText(wantText) {
						t.Fatalf("node %d %v: text %q, strata generate %q", i, sp, got, jsonText(wantText))
					}
					if n := r.Usage.(*usageJSON).CompletionTokens; n != len(wantTokens) {
						t.Fatalf("node %d %v: %d tokens, strata generate %d", i, sp, n, len(wantTokens))
					}
					if r.Strata == nil || len(r.Strata.Paths) == 0 || !strings.Contains(r.Strata.Paths[0], "→") {
						t.Fatalf("node %d: strata %+v, want a multi-hop path", i, r.Strata)
					}
				}
				// The token ids too, through the node's in-process client.
				res, err := c.nodes[1].Complete(context.Background(), node.Request{Prompt: prompt, MaxTokens: maxTokens, Sampling: samplingOf(sp)})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(res.Tokens, wantTokens) {
					t.Fatalf("%v: swarm tokens %v, strata generate %v", sp, res.Tokens, wantTokens)
				}
				t.Logf("%v: %d tokens via %v", sp, len(wantTokens), res.Paths)
			}
		})
	}
}
