package refcheck

import (
	"path/filepath"
	"testing"

	"github.com/stratanet/strata/engine"
)

// deepseek2Shapes are DeepSeek-V3/Kimi-K2 in miniature, as `strata model
// gen --arch deepseek2` writes them: MLA in llama.cpp's layout (attn_k_b,
// attn_v_b), one leading dense layer, 8 experts in 4 groups of which 2
// are kept, 3 used, a shared expert, sigmoid gating with exp_probs_b,
// renormalised weights scaled by 2.5; the older attn_kv_b layout; a
// DeepSeek-V2-like softmax router without renormalisation; YaRN with
// the log multiplier V3's files carry; V2-Lite's plain Q projection.
func deepseek2Shapes() map[string]engine.GenConfig {
	base := engine.GenConfig{Arch: "deepseek2", Layers: 4, Dim: 128, Heads: 4, FFN: 256, Vocab: 600, Seed: 71,
		Experts: 8, ExpertsUsed: 3, ExpertFFN: 64, DeepSeek2: engine.DeepSeek2Gen{ExpertGroups: 4, GroupsUsed: 2}}
	kvb := base
	kvb.DeepSeek2.KVB = true
	v2 := base
	v2.DeepSeek2 = engine.DeepSeek2Gen{Softmax: true, WeightsScale: 1.5, SharedExperts: 2}
	yarn := base
	yarn.RopeScaling, yarn.RopeScalingFactor, yarn.Context = "yarn", 40, 4096
	// 26 layers: llama.cpp's DeepSeek-V2-Lite shape, a plain attn_q.
	lite := base
	lite.Layers, lite.Dim, lite.FFN, lite.ExpertFFN = 26, 64, 64, 32
	// 24 heads on MLA's one KV head: the Go engine's attention units of
	// 16 heads and 8.
	wide := base
	wide.Heads = 24
	return map[string]engine.GenConfig{"mla": base, "kv_b": kvb, "softmax": v2, "yarn": yarn, "lite": lite, "24-heads": wide}
}

// TestDeepSeek2LogitsMatchLlamaCpp: on F32 weights, the engine's deepseek2
// gives llama.cpp's logits (its deepseek2 graph, through its C API) within
// 1e-4 relative, for prefill and for a decode step after it (the cached
// latent read back).
func TestDeepSeek2LogitsMatchLlamaCpp(t *testing.T) {
	dir := t.TempDir()
	for name, c := range deepseek2Shapes() {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name+".gguf")
			if err := engine.GenerateFile(path, c); err != nil {
				t.Fatal(err)
			}
			ref, err := llamacppLogits(path, ollamaTokens, c.Vocab)
			if err != nil {
				t.Fatal(err)
			}
			got := engineLogits(t, path, ollamaTokens)
			d := relDist(got, ref)
			// Decode: the prompt less 4 tokens, then those one at a time.
			dec := engineDecodeLogits(t, path, ollamaTokens, len(ollamaTokens)-4)
			dd := relDist(dec, ref)
			t.Logf("deepseek2 %s: engine %.3g (prefill), %.3g (decode step) relative from llama.cpp", name, d, dd)
			if !(d <= 1e-4) || !(dd <= 1e-4) {
				t.Errorf("engine deviates from llama.cpp by %.3g / %.3g relative (limit 1e-4)", d, dd)
			}
		})
	}
}

// TestDeepSeek2LogitsMatchOllama: ollama's own deepseek2 is a second
// oracle where it computes what llama.cpp does: the attn_kv_b layout
// (its MLA path scales Q·K by 1/√key_length; TestDeepSeek2LlamaCpp) and
// sigmoid routing without expert groups (it has none).
func TestDeepSeek2LogitsMatchOllama(t *testing.T) {
	c := deepseek2Shapes()["kv_b"]
	c.DeepSeek2.ExpertGroups, c.DeepSeek2.GroupsUsed = 0, 0
	dir := t.TempDir()
	src, path := filepath.Join(dir, "src.gguf"), filepath.Join(dir, "kv_b.gguf")
	if err := engine.GenerateFile(src, c); err != nil {
		t.Fatal(err)
	}
	// ollama takes ln(rope.scaling.factor) whether or not the file
	// scales RoPE (0 where absent: NaN logits); the converter writes
	// factor 1 for a model without scaling.
	keep := func(string, int) engine.DType { return engine.F32 }
	if err := quantizeModel(src, path, filepath.Join(dir, "same.gguf"), keep, engine.KV{Key: "deepseek2.rope.scaling.factor", Value: float32(1)}); err != nil {
		t.Fatal(err)
	}
	ref, err := ollamaLogits(path, ollamaTokens)
	if err != nil {
		t.Fatal(err)
	}
	lc, err := llamacppLogits(path, ollamaTokens, c.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	got := engineLogits(t, path, ollamaTokens)
	d := relDist(got, ref)
	t.Logf("deepseek2 kv_b, no groups: engine %.3g, llama.cpp %.3g relative from ollama", d, relDist(lc, ref))
	if !(d <= 1e-4) {
		t.Errorf("engine deviates from ollama by %.3g relative (limit 1e-4)", d)
	}
}

// TestDeepSeek2QuantizedLogits: weights quantised by ggml to Q8_0 and to a
// Q4_K_M mix (the router and exp_probs_b left F32): the engine must be
// about as close to llama.cpp on the dequantised-F32 file as llama.cpp's
// own quantised kernels are, as TestMoEQuantizedLogits.
func TestDeepSeek2QuantizedLogits(t *testing.T) {
	c := deepseek2Shapes()["mla"]
	c.Dim, c.FFN, c.ExpertFFN = 256, 512, 256
	c.DeepSeek2.QLoraRank, c.DeepSeek2.KVLoraRank = 256, 256
	dir := t.TempDir()
	src := filepath.Join(dir, "src.gguf")
	if err := engine.GenerateFile(src, c); err != nil {
		t.Fatal(err)
	}
	mixes := map[string]func(string, int) engine.DType{
		"q8_0":   func(string, int) engine.DType { return engine.Q8_0 },
		"q4_k_m": q4KMMoE(c.Experts),
	}
	for mname, pick := range mixes {
		t.Run(mname, func(t *testing.T) {
			qp, dp := filepath.Join(dir, mname+".gguf"), filepath.Join(dir, mname+"-deq.gguf")
			if err := quantizeModel(src, qp, dp, pick); err != nil {
				t.Fatal(err)
			}
			ref, err := llamacppLogits(dp, ollamaTokens, c.Vocab)
			if err != nil {
				t.Fatal(err)
			}
			lq, err := llamacppLogits(qp, ollamaTokens, c.Vocab)
			if err != nil {
				t.Fatal(err)
			}
			ours := engineLogits(t, qp, ollamaTokens)
			dOurs, dLC := relDist(ours, ref), relDist(lq, ref)
			t.Logf("deepseek2 %s: engine %.3g, llama.cpp quantized %.3g from llama.cpp on the dequantized-F32 file", mname, dOurs, dLC)
			if dOurs > max(1.25*dLC, 1e-4) {
				t.Errorf("engine is %.3g from the reference, llama.cpp's quantized kernels %.3g", dOurs, dLC)
			}
		})
	}
}
