package api

import (
	"testing"

	"github.com/stratanet/strata/engine"
)

// TestMixtralSwarm is TestQ4KMSwarm on a Mixtral-style llama: 8 experts,
// 2 a token, each FFN wide (llama.cpp's rules put attn_k and attn_v in
// Q8_0 and attn_output in Q5_K with 8 experts), its layers split between
// the nodes.
func TestMixtralSwarm(t *testing.T) {
	swarmMatchesSingleProcess(t, engine.GenConfig{Arch: "llama", Layers: 8, Dim: 256, Heads: 8, KVHeads: 2, FFN: 256,
		Vocab: 512, Seed: 25, Mix: "q4_k_m", Experts: 8, ExpertsUsed: 2})
}

// TestGemma2Swarm is TestQ4KMSwarm on gemma2: alternating local (a window
// of 8, shorter than the prompt and completion) and global layers,
// attention and final logit soft-capping.
func TestGemma2Swarm(t *testing.T) {
	swarmMatchesSingleProcess(t, engine.GenConfig{Arch: "gemma2", Layers: 6, Dim: 256, Heads: 4, KVHeads: 2, HeadDim: 64, FFN: 512,
		Vocab: 512, Seed: 26, Mix: "q4_k_m", SlidingWindow: 8})
}
