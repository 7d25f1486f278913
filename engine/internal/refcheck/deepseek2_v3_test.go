package refcheck

import (
	"path/filepath"
	"testing"

	"github.com/stratanet/strata/engine"
)

// TestDeepSeek2V3AttentionShape: DeepSeek-V3's attention shape (128 heads,
// q_lora_rank 1536, kv_lora_rank 512, RoPE 64 + 128 per head, V 128,
// YaRN factor 40 over 4096 with its log multiplier) on a narrow model
// (dim 512, one layer, a small dense FFN): the engine against llama.cpp,
// F32, within 1e-4.
func TestDeepSeek2V3AttentionShape(t *testing.T) {
	if testing.Short() {
		t.Skip("260 MB of weights")
	}
	c := engine.GenConfig{Arch: "deepseek2", Layers: 1, Dim: 512, Heads: 128, HeadDim: 192, FFN: 256, Vocab: 600, Seed: 72,
		Context: 163840, RopeScaling: "yarn", RopeScalingFactor: 40, RopeOrigContext: 4096,
		DeepSeek2: engine.DeepSeek2Gen{QLoraRank: 1536, KVLoraRank: 512, RopeDims: 64, VHeadDim: 128}}
	path := filepath.Join(t.TempDir(), "v3attn.gguf")
	if err := engine.GenerateFile(path, c); err != nil {
		t.Fatal(err)
	}
	ref, err := llamacppLogits(path, ollamaTokens, c.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	got := engineLogits(t, path, ollamaTokens)
	d := relDist(got, ref)
	t.Logf("deepseek2, DeepSeek-V3's attention shape: engine %.3g relative from llama.cpp", d)
	if !(d <= 1e-4) {
		t.Errorf("engine deviates from llama.cpp by %.3g relative (limit 1e-4)", d)
	}
}

// TestDeepSeek2V3RoutingShape: DeepSeek-V3's routing shape (256 experts
// in 8 groups, 4 kept, 8 used a token, one shared expert, sigmoid with
// exp_probs_b, renormalised, scale 2.5) and Kimi-K2's (384 experts, no
// groups, 8 used, scale 2.827) on narrow experts: the engine against
// llama.cpp, F32, within 1e-4.
func TestDeepSeek2V3RoutingShape(t *testing.T) {
	for name, c := range map[string]engine.GenConfig{
		"deepseek-v3": {Arch: "deepseek2", Layers: 3, Dim: 128, Heads: 4, FFN: 256, Vocab: 600, Seed: 73,
			Experts: 256, ExpertsUsed: 8, ExpertFFN: 32, DeepSeek2: engine.DeepSeek2Gen{ExpertGroups: 8, GroupsUsed: 4}},
		"kimi-k2": {Arch: "deepseek2", Layers: 3, Dim: 128, Heads: 4, FFN: 256, Vocab: 600, Seed: 74,
			Experts: 384, ExpertsUsed: 8, ExpertFFN: 32, DeepSeek2: engine.DeepSeek2Gen{WeightsScale: 2.827}},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), name+".gguf")
			if err := engine.GenerateFile(path, c); err != nil {
				t.Fatal(err)
			}
			ref, err := llamacppLogits(path, ollamaTokens, c.Vocab)
			if err != nil {
				t.Fatal(err)
			}
			got := engineLogits(t, path, ollamaTokens)
			d := relDist(got, ref)
			t.Logf("deepseek2, %s's routing shape: engine %.3g relative from llama.cpp", name, d)
			if !(d <= 1e-4) {
				t.Errorf("engine deviates from llama.cpp by %.3g relative (limit 1e-4)", d)
			}
		})
	}
}
