package refcheck

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/stratanet/strata/engine"
)

// ropeScalingCases are files with YaRN or linear RoPE scaling: an original
// context (32) shorter than the 48 positions run, long ones (8192, 4096)
// where YaRN's ramp crosses the middle dimensions, and yarn_* keys that
// llama.cpp does not read for qwen3 beside rope.scaling.attn_factor, which
// it does.
var ropeScalingCases = map[string]struct {
	c     engine.GenConfig
	extra []engine.KV
}{
	"qwen3-yarn-orig32": {c: engine.GenConfig{Arch: "qwen3", Layers: 2, Dim: 128, Heads: 4, KVHeads: 2, HeadDim: 48, FFN: 256, Vocab: 600, Seed: 41,
		RopeBase: 1e6, NormEps: 1e-6, Context: 128, RopeScaling: "yarn", RopeScalingFactor: 4, RopeOrigContext: 32}},
	"qwen2-yarn-orig8192": {c: engine.GenConfig{Arch: "qwen2", Layers: 2, Dim: 128, Heads: 2, KVHeads: 1, FFN: 256, Vocab: 600, Seed: 42,
		RopeBase: 10000, NormEps: 1e-6, Context: 32768, RopeScaling: "yarn", RopeScalingFactor: 4, RopeOrigContext: 8192}},
	"llama-yarn-orig32": {c: engine.GenConfig{Arch: "llama", Layers: 2, Dim: 128, Heads: 4, KVHeads: 2, FFN: 256, Vocab: 600, Seed: 43,
		RopeBase: 10000, NormEps: 1e-5, Context: 256, RopeScaling: "yarn", RopeScalingFactor: 8, RopeOrigContext: 32}},
	"llama-linear": {c: engine.GenConfig{Arch: "llama", Layers: 2, Dim: 128, Heads: 4, KVHeads: 2, FFN: 256, Vocab: 600, Seed: 44,
		RopeBase: 10000, NormEps: 1e-5, Context: 256, RopeScaling: "linear", RopeScalingFactor: 2.5}},
	"qwen3-yarn-keys": {c: engine.GenConfig{Arch: "qwen3", Layers: 2, Dim: 128, Heads: 2, KVHeads: 2, HeadDim: 64, FFN: 256, Vocab: 600, Seed: 45,
		RopeBase: 10000, NormEps: 1e-6, Context: 16384, RopeScaling: "yarn", RopeScalingFactor: 4, RopeOrigContext: 4096},
		extra: []engine.KV{{Key: "qwen3.rope.scaling.yarn_ext_factor", Value: float32(0.5)}, {Key: "qwen3.rope.scaling.yarn_beta_fast", Value: float32(16)},
			{Key: "qwen3.rope.scaling.yarn_beta_slow", Value: float32(2)}, {Key: "qwen3.rope.scaling.yarn_log_multiplier", Value: float32(0.5)},
			{Key: "qwen3.rope.scaling.attn_factor", Value: float32(0.9)}}},
}

// ropeScalingFile writes case name's file under dir.
func ropeScalingFile(t *testing.T, dir, name string) string {
	t.Helper()
	tc := ropeScalingCases[name]
	path := filepath.Join(dir, name+".gguf")
	if err := engine.GenerateFile(path, tc.c); err != nil {
		t.Fatal(err)
	}
	if tc.extra == nil {
		return path
	}
	p2 := filepath.Join(dir, name+"-keys.gguf")
	if err := quantizeModel(path, p2, filepath.Join(dir, "unused.gguf"), func(string, int) engine.DType { return engine.F32 }, tc.extra...); err != nil {
		t.Fatal(err)
	}
	return p2
}

func ropeScalingTokens() []int32 {
	tokens := make([]int32, 48)
	for i := range tokens {
		tokens[i] = int32(1 + (i*37)%500)
	}
	return tokens
}

// TestRopeScalingLlamaCpp: on every case, the engine's logits are within
// 1e-4 relative of llama.cpp's own (its loader reading the keys, its
// cparams, its graphs) on F32 weights.
func TestRopeScalingLlamaCpp(t *testing.T) {
	tokens := ropeScalingTokens()
	for name, tc := range ropeScalingCases {
		t.Run(name, func(t *testing.T) {
			path := ropeScalingFile(t, t.TempDir(), name)
			ref, err := llamacppLogits(path, tokens, tc.c.Vocab)
			if err != nil {
				t.Fatal(err)
			}
			d := relDist(engineLogits(t, path, tokens), ref)
			t.Logf("%s: relative %.3g from llama.cpp", name, d)
			if !(d <= 1e-4) {
				t.Errorf("engine deviates from llama.cpp by %.3g relative (limit 1e-4)", d)
			}
		})
	}
}

// TestRopeScalingMatchesGGML: on every case, the engine gives the logits
// of our ggml graph with ggml_rope_ext given the scaling as llama.cpp
// derives it (ref_rope_params), within 1e-4 relative on F32 weights.
func TestRopeScalingMatchesGGML(t *testing.T) {
	tokens := ropeScalingTokens()
	for name, tc := range ropeScalingCases {
		t.Run(name, func(t *testing.T) {
			path := ropeScalingFile(t, t.TempDir(), name)
			ref, err := ggmlLogits(path, tc.c, tokens)
			if err != nil {
				t.Fatal(err)
			}
			d := relDist(engineLogits(t, path, tokens), ref)
			t.Logf("%s: relative %.3g", name, d)
			if !(d <= 1e-4) {
				t.Errorf("engine deviates from ggml by %.3g relative (limit 1e-4)", d)
			}
		})
	}
}

// TestRopeScalingIsUsed: the scaling changes the logits (by far more than
// the 1e-4 above), so the test above would see it ignored.
func TestRopeScalingIsUsed(t *testing.T) {
	tokens := ropeScalingTokens()
	c := engine.GenConfig{Arch: "qwen3", Layers: 2, Dim: 128, Heads: 4, KVHeads: 2, HeadDim: 48, FFN: 256, Vocab: 600, Seed: 41,
		RopeBase: 1e6, NormEps: 1e-6, Context: 128}
	dir := t.TempDir()
	plain, yarn := filepath.Join(dir, "plain.gguf"), filepath.Join(dir, "yarn.gguf")
	if err := engine.GenerateFile(plain, c); err != nil {
		t.Fatal(err)
	}
	c.RopeScaling, c.RopeScalingFactor, c.RopeOrigContext = "yarn", 4, 32
	if err := engine.GenerateFile(yarn, c); err != nil {
		t.Fatal(err)
	}
	d := relDist(engineLogits(t, yarn, tokens), engineLogits(t, plain, tokens))
	t.Logf("yarn vs none: relative %.3g", d)
	if !(d > 1e-2) || math.IsNaN(d) {
		t.Errorf("YaRN moved the logits by %.3g only", d)
	}
}
