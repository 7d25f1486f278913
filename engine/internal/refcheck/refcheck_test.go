package refcheck

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/stratanet/strata/engine"
)

var shapes = map[string]engine.GenConfig{
	"llama-mha": {Arch: "llama", Layers: 3, Dim: 128, Heads: 4, KVHeads: 4, FFN: 256, Vocab: 512, Seed: 11, RopeBase: 10000, NormEps: 1e-5},
	"llama-gqa": {Arch: "llama", Layers: 3, Dim: 128, Heads: 8, KVHeads: 2, FFN: 320, Vocab: 600, Seed: 12, RopeBase: 10000, NormEps: 1e-5},
	"qwen2":     {Arch: "qwen2", Layers: 3, Dim: 128, Heads: 4, KVHeads: 2, FFN: 256, Vocab: 700, Seed: 13, RopeBase: 1e6, NormEps: 1e-6},
	// Llama 3.1's RoPE frequency factors, tied embeddings (Llama 3.2).
	"llama3.1-rope-freqs": {Arch: "llama", Layers: 3, Dim: 128, Heads: 4, KVHeads: 2, FFN: 256, Vocab: 600, Seed: 14, RopeBase: 500000, NormEps: 1e-5, RopeFreqs: true, Tied: true},
	// qwen3: per-head Q/K RMSNorm, no biases, a head size other than Dim/Heads.
	"qwen3": {Arch: "qwen3", Layers: 3, Dim: 128, Heads: 4, KVHeads: 2, HeadDim: 48, FFN: 256, Vocab: 700, Seed: 15, RopeBase: 1e6, NormEps: 1e-6},
	// phi3: fused attn_qkv and gate+up (Phi-3 mini), and Phi-3.5 mini's
	// LongRoPE short factors with its attention factor, with GQA.
	"phi3":            {Arch: "phi3", Layers: 3, Dim: 128, Heads: 4, KVHeads: 4, FFN: 256, Vocab: 600, Seed: 16, RopeBase: 10000, NormEps: 1e-5},
	"phi3.5-longrope": {Arch: "phi3", Layers: 3, Dim: 128, Heads: 8, KVHeads: 2, FFN: 320, Vocab: 600, Seed: 17, RopeBase: 10000, NormEps: 1e-5, LongRoPE: true},
}

// TestLogitsMatchGGML: the engine's logits match ggml's within 1e-4
// relative (max |Δ| over max |logit|) for every shape, F32 weights.
func TestLogitsMatchGGML(t *testing.T) {
	// Positions well past 8192/2π·4 would be needed to see every RoPE
	// factor at work; a long prompt reaches the blended ones.
	tokens := []int32{1, 40, 300, 7, 99, 260, 5, 120, 33, 444, 17, 2, 301, 302, 303, 500}
	for name, c := range shapes {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), name+".gguf")
			if err := engine.GenerateFile(path, c); err != nil {
				t.Fatal(err)
			}
			ref, err := ggmlLogits(path, c, tokens)
			if err != nil {
				t.Fatal(err)
			}
			got := engineLogits(t, path, tokens)
			scale, diff := 0.0, 0.0
			for i := range ref {
				scale = math.Max(scale, math.Abs(float64(ref[i])))
				diff = math.Max(diff, math.Abs(float64(ref[i]-got[i])))
			}
			t.Logf("%s: max |Δ| %.3g, max |logit| %.3g, relative %.3g", name, diff, scale, diff/scale)
			if !(diff/scale <= 1e-4) {
				t.Errorf("engine deviates from ggml by %.3g relative (limit 1e-4)", diff/scale)
			}
		})
	}
}

func engineLogits(t *testing.T, path string, tokens []int32) []float32 {
	s, err := engine.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ss, _ := s.NewSession(64)
	out, err := s.Forward(context.Background(), engine.Step{Session: ss, Tokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	return out.Logits
}
