package refcheck

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stratanet/strata/engine"
)

// moeShapes are mixtures of experts in miniature: Qwen3-30B-A3B's qwen3moe
// (a head size of its own, expert width apart from the dense one), one
// expert a token (ggml's single-view path), and Mixtral's llama with 8
// experts, 2 a token.
var moeShapes = map[string]engine.GenConfig{
	"qwen3moe": {Arch: "qwen3moe", Layers: 3, Dim: 128, Heads: 4, KVHeads: 2, HeadDim: 64, FFN: 384, Vocab: 700, Seed: 41,
		RopeBase: 1e6, NormEps: 1e-6, Experts: 16, ExpertsUsed: 4, ExpertFFN: 64},
	"qwen3moe-top1": {Arch: "qwen3moe", Layers: 2, Dim: 128, Heads: 4, KVHeads: 4, FFN: 128, Vocab: 600, Seed: 42,
		RopeBase: 1e6, NormEps: 1e-6, Experts: 4, ExpertsUsed: 1, ExpertFFN: 96},
	"mixtral": {Arch: "llama", Layers: 3, Dim: 128, Heads: 8, KVHeads: 2, FFN: 256, Vocab: 600, Seed: 43,
		RopeBase: 1e6, NormEps: 1e-5, Experts: 8, ExpertsUsed: 2},
}

// TestMoELogitsMatchGGML: on F32 weights, the engine's mixture of experts
// gives ggml's logits (llama.cpp's build_moe_ffn graph: ggml_mul_mat_id,
// argsort top-k, sum/clamp/div) within 1e-4 relative.
func TestMoELogitsMatchGGML(t *testing.T) {
	tokens := []int32{1, 40, 300, 7, 99, 260, 5, 120, 33, 444, 17, 2, 301, 302, 303, 500}
	for name, c := range moeShapes {
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
			d := relDist(got, ref)
			t.Logf("%s: relative max |Δ| %.3g", name, d)
			if !(d <= 1e-4) {
				t.Errorf("engine deviates from ggml by %.3g relative (limit 1e-4)", d)
			}
		})
	}
}

// q4KMMoE is q4KM with llama.cpp's rules for 8-expert models (Mixtral):
// attn_k and attn_v in Q8_0, attn_output in Q5_K; ffn_down_exps is an
// ffn_down.
func q4KMMoE(experts int) func(string, int) engine.DType {
	return func(name string, cols int) engine.DType {
		if experts == 8 {
			switch {
			case strings.Contains(name, "attn_v") || strings.Contains(name, "attn_k."):
				return engine.Q8_0
			case strings.Contains(name, "attn_output"):
				return fallback(engine.Q5_K, cols)
			}
		}
		return q4KM(name, cols)
	}
}

// TestMoEQuantizedLogits: experts quantised by ggml to Q8_0, to a Q4_K_M
// mix and to MXFP4 (the rest Q8_0), the router left F32 as llama-quantize leaves it. As
// TestQuantizedLogits, the engine must be about as close to ggml's F32
// graph on the dequantised weights as ggml's own quantised kernels are.
func TestMoEQuantizedLogits(t *testing.T) {
	tokens := []int32{1, 40, 300, 7, 99, 260, 5, 120, 33, 444, 17, 2, 301, 302, 303, 500}
	shapes := map[string]engine.GenConfig{
		"qwen3moe-256": {Arch: "qwen3moe", Layers: 2, Dim: 256, Heads: 4, KVHeads: 2, HeadDim: 128, FFN: 768, Vocab: 640, Seed: 44,
			RopeBase: 1e6, NormEps: 1e-6, Experts: 16, ExpertsUsed: 4, ExpertFFN: 256},
		"mixtral-256": {Arch: "llama", Layers: 2, Dim: 256, Heads: 8, KVHeads: 2, FFN: 512, Vocab: 512, Seed: 45,
			RopeBase: 1e6, NormEps: 1e-5, Experts: 8, ExpertsUsed: 2},
	}
	dir := t.TempDir()
	for sname, c := range shapes {
		src := filepath.Join(dir, sname+".gguf")
		if err := engine.GenerateFile(src, c); err != nil {
			t.Fatal(err)
		}
		mixes := map[string]func(string, int) engine.DType{
			"q8_0":   func(string, int) engine.DType { return engine.Q8_0 },
			"q4_k_m": q4KMMoE(c.Experts),
			// llama.cpp's MXFP4_MOE (gpt-oss's files): experts MXFP4, the rest Q8_0.
			"mxfp4_moe": func(name string, _ int) engine.DType {
				if strings.Contains(name, "_exps.") {
					return engine.MXFP4
				}
				return engine.Q8_0
			},
		}
		for mname, pick := range mixes {
			t.Run(sname+"/"+mname, func(t *testing.T) {
				qp, dp := filepath.Join(dir, sname+"-"+mname+".gguf"), filepath.Join(dir, sname+"-"+mname+"-deq.gguf")
				if err := quantizeModel(src, qp, dp, pick); err != nil {
					t.Fatal(err)
				}
				ref, err := ggmlLogits(dp, c, tokens)
				if err != nil {
					t.Fatal(err)
				}
				gq, err := ggmlLogits(qp, c, tokens)
				if err != nil {
					t.Fatal(err)
				}
				ours := engineLogits(t, qp, tokens)
				dOurs, dGGML := relDist(ours, ref), relDist(gq, ref)
				t.Logf("%s %s: engine %.3g, ggml quantized %.3g from the dequantized-F32 reference", sname, mname, dOurs, dGGML)
				if dOurs > max(1.25*dGGML, 1e-4) {
					t.Errorf("engine is %.3g from the reference, ggml's quantized kernels %.3g", dOurs, dGGML)
				}
			})
		}
	}
}
