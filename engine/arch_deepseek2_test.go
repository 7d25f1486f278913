package engine

import (
	"testing"
)

// deepseek2Test is a small DeepSeek-V3-shaped model: 4 layers, the first
// dense, 8 experts in 4 groups of which 2 are kept, 3 used per token, one
// shared expert, sigmoid routing with a selection bias.
func deepseek2Test() GenConfig {
	return GenConfig{Arch: "deepseek2", Layers: 4, Dim: 128, Heads: 4, FFN: 256, Vocab: 300, Seed: 61,
		Experts: 8, ExpertsUsed: 3, ExpertFFN: 64,
		DeepSeek2: DeepSeek2Gen{ExpertGroups: 4, GroupsUsed: 2}}
}

// TestDeepSeek2BatchInvariance: a deepseek2 session's logits are the same
// bits alone, in a batch of 16, at 1–3 threads, and token by token; in
// the MLA layout, the older kv_b one, and quantised.
func TestDeepSeek2BatchInvariance(t *testing.T) {
	kvb := deepseek2Test()
	kvb.DeepSeek2.KVB = true
	v2 := deepseek2Test()
	v2.DeepSeek2 = DeepSeek2Gen{Softmax: true, WeightsScale: 1}
	yarn := deepseek2Test()
	yarn.RopeScaling, yarn.RopeScalingFactor = "yarn", 40
	cases := []struct {
		name string
		c    GenConfig
		dt   DType
		mix  string
	}{
		{"mla-f32", deepseek2Test(), F32, ""}, {"mla-q8_0", deepseek2Test(), Q8_0, ""}, {"mla-q4_k_m", deepseek2Test(), F32, "q4_k_m"},
		{"kv_b-f32", kvb, F32, ""}, {"softmax-f32", v2, F32, ""}, {"yarn-f32", yarn, F32, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			c.DType, c.Mix = tc.dt, tc.mix
			path := genModel(t, c)
			prompt := []int32{3, 1, 4, 1, 5, 9, 2}
			decode := []int32{6, 5, 3}
			alone := sessionLogits(t, path, 1, prompt, decode, 0, false)
			for _, threads := range []int{1, 2, 3} {
				for _, slot := range []int{0, 7, 15} {
					got := sessionLogits(t, path, threads, prompt, decode, slot, true)
					for i := range alone {
						if !sameBits(alone[i], got[i]) {
							t.Fatalf("%d threads, slot %d of 16, step %d: logits differ from the session alone", threads, slot, i)
						}
					}
				}
			}
			stepwise := sessionLogits(t, path, 2, nil, append(append([]int32(nil), prompt...), decode...), 0, false)
			for i := range decode {
				if !sameBits(alone[1+i], stepwise[len(prompt)+i]) {
					t.Fatalf("decode %d: logits differ after a token-by-token prefill", i)
				}
			}
		})
	}
}
