package refcheck

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stratanet/strata/engine"
)

// gptossTokenizer is the generated files' vocabulary (deepseek's BPE
// tokens under qwen2's pre-tokenizer, as TestGptOssOllamaLlamaCpp).
func gptossTokenizer(t *testing.T, vocab int) []engine.KV {
	var tok []engine.KV
	for _, kv := range deepseekTokenizer(t, t.TempDir(), vocab) {
		if kv.Key == "tokenizer.ggml.pre" {
			kv.Value = "qwen2"
		}
		tok = append(tok, kv)
	}
	return tok
}

// TestGptOssLogitsMatchLlamaCpp: on F32 weights the Go engine's gpt-oss
// (sinks, biases, the OAI router and activation, YaRN, the window on even
// layers) gives llama.cpp's logits within 1e-4 relative, with a window
// that covers the prompt and with one of 4 over 16 tokens; with a
// covering window ollama's gptoss is a second oracle.
func TestGptOssLogitsMatchLlamaCpp(t *testing.T) {
	const vocab = 600
	tok := gptossTokenizer(t, vocab)
	dir := t.TempDir()
	for _, s := range []gptossShape{
		{layers: 2, dim: 64, heads: 4, kvHeads: 2, headDim: 16, experts: 4, used: 2, ffn: 64, window: 128, yarn: true},
		{layers: 3, dim: 64, heads: 4, kvHeads: 2, headDim: 16, experts: 4, used: 2, ffn: 64, window: 4, yarn: true},
		{layers: 2, dim: 64, heads: 8, kvHeads: 2, headDim: 16, experts: 8, used: 4, ffn: 32, window: 5},
		// gpt-oss-20b's attention shape (width 2880, 64 heads of 64, 8 KV
		// heads), its experts narrowed.
		{layers: 2, dim: 2880, heads: 64, kvHeads: 8, headDim: 64, experts: 4, used: 2, ffn: 128, window: 8, yarn: true},
	} {
		name := fmt.Sprintf("gptoss-l%d-w%d-yarn%v", s.layers, s.window, s.yarn)
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name+".gguf")
			if err := writeGptOss(path, s, tok, vocab, 61); err != nil {
				t.Fatal(err)
			}
			ref, err := llamacppLogits(path, ollamaTokens, vocab)
			if err != nil {
				t.Fatal(err)
			}
			got := engineLogits(t, path, ollamaTokens)
			d := relDist(got, ref)
			t.Logf("%s: engine %.3g relative from llama.cpp", name, d)
			if !(d <= 1e-4) {
				t.Errorf("engine is %.3g from llama.cpp (limit 1e-4)", d)
			}
			if s.window < len(ollamaTokens) {
				return
			}
			o, err := ollamaLogits(path, ollamaTokens)
			if err != nil {
				t.Fatal(err)
			}
			d = relDist(got, o)
			t.Logf("%s: engine %.3g relative from ollama", name, d)
			if !(d <= 1e-4) {
				t.Errorf("engine is %.3g from ollama (limit 1e-4)", d)
			}
		})
	}
}

// TestGptOssQuantizedLogits: weights quantized by ggml to Q8_0, a Q4_K_M
// mix and MXFP4_MOE (experts MXFP4, the rest Q8_0), the router and all
// biases left F32 as llama-quantize leaves them. As TestMoEQuantizedLogits,
// the engine must be about as close to llama.cpp on the dequantized
// weights (F32) as llama.cpp's own quantized kernels are.
func TestGptOssQuantizedLogits(t *testing.T) {
	const vocab = 600
	tok := gptossTokenizer(t, vocab)
	dir := t.TempDir()
	shapes := map[string]gptossShape{
		"256": {layers: 2, dim: 256, heads: 4, kvHeads: 2, headDim: 64, experts: 4, used: 2, ffn: 256, window: 128, yarn: true},
		// gpt-oss-20b's width, 2880: rows that are not whole 256-blocks,
		// so Q4_K_M falls back as llama.cpp's does, and 90 MXFP4 blocks.
		"2880": {layers: 2, dim: 2880, heads: 8, kvHeads: 2, headDim: 64, experts: 4, used: 2, ffn: 128, window: 8, yarn: true},
	}
	weights := func(pick func(string, int) engine.DType) func(string, int) engine.DType {
		return func(name string, cols int) engine.DType {
			if strings.HasSuffix(name, ".bias") {
				return engine.F32
			}
			return pick(name, cols)
		}
	}
	for sname, s := range shapes {
		src := filepath.Join(dir, "gptoss-"+sname+".gguf")
		if err := writeGptOss(src, s, tok, vocab, 62); err != nil {
			t.Fatal(err)
		}
		mixes := map[string]func(string, int) engine.DType{
			"q8_0":   func(string, int) engine.DType { return engine.Q8_0 },
			"q4_k_m": q4KMMoE(s.experts),
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
				if err := quantizeModel(src, qp, dp, weights(pick)); err != nil {
					t.Fatal(err)
				}
				ref, err := llamacppLogits(dp, ollamaTokens, vocab)
				if err != nil {
					t.Fatal(err)
				}
				lq, err := llamacppLogits(qp, ollamaTokens, vocab)
				if err != nil {
					t.Fatal(err)
				}
				ours := engineLogits(t, qp, ollamaTokens)
				dOurs, dRef := relDist(ours, ref), relDist(lq, ref)
				t.Logf("gpt-oss %s %s: engine %.3g, llama.cpp quantized %.3g from the dequantized-F32 reference", sname, mname, dOurs, dRef)
				if dOurs > max(1.25*dRef, 1e-4) {
					t.Errorf("engine is %.3g from the reference, llama.cpp's quantized kernels %.3g", dOurs, dRef)
				}
			})
		}
	}
}

// dequantizeFile writes src with every tensor dequantized to F32 by ggml.
func dequantizeFile(src, dst string) error {
	f, fh, err := engine.OpenFile(src)
	if err != nil {
		return err
	}
	defer fh.Close()
	var ts []engine.WriteTensor
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		raw := make([]byte, ti.Size)
		if err := f.ReadTensor(ti, raw); err != nil {
			return err
		}
		if ti.Type != engine.F32 {
			raw = f32Bytes(ggmlDequantize(ti.Type, raw, int(ti.Elements())))
		}
		ts = append(ts, engine.WriteTensor{Name: ti.Name, Dims: ti.Dims, Type: engine.F32, Data: writeBytes(raw)})
	}
	return writeFile(dst, f.KV, ts)
}

// TestGptOssGeneratedFiles: the files `strata model gen --arch gpt-oss`
// writes load in llama.cpp (its keys and tensor names), and the engine
// gives llama.cpp's logits: within 1e-4 relative in F32; in Q8_0, Q4_K_M
// and MXFP4_MOE about as close to llama.cpp on the dequantized weights as
// llama.cpp's own quantized kernels are.
func TestGptOssGeneratedFiles(t *testing.T) {
	dir := t.TempDir()
	base := engine.GenConfig{Arch: "gpt-oss", Layers: 3, Dim: 256, Heads: 4, KVHeads: 2, HeadDim: 64, FFN: 256, Vocab: 600, Seed: 63,
		Experts: 8, ExpertsUsed: 2, SlidingWindow: 6, Context: 131072, RopeBase: 150000,
		RopeScaling: "yarn", RopeScalingFactor: 32, RopeOrigContext: 4096}
	for _, ty := range []struct {
		name string
		dt   engine.DType
		mix  string
	}{{"f32", engine.F32, ""}, {"q8_0", engine.Q8_0, ""}, {"q4_k_m", engine.F32, "q4_k_m"}, {"mxfp4_moe", engine.F32, "mxfp4_moe"}} {
		t.Run(ty.name, func(t *testing.T) {
			c := base
			c.DType, c.Mix = ty.dt, ty.mix
			path := filepath.Join(dir, ty.name+".gguf")
			if err := engine.GenerateFile(path, c); err != nil {
				t.Fatal(err)
			}
			lq, err := llamacppLogits(path, ollamaTokens, c.Vocab)
			if err != nil {
				t.Fatal(err)
			}
			ours := engineLogits(t, path, ollamaTokens)
			if ty.name == "f32" {
				d := relDist(ours, lq)
				t.Logf("generated gpt-oss f32: engine %.3g relative from llama.cpp", d)
				if !(d <= 1e-4) {
					t.Errorf("engine is %.3g from llama.cpp (limit 1e-4)", d)
				}
				return
			}
			dp := filepath.Join(dir, ty.name+"-deq.gguf")
			if err := dequantizeFile(path, dp); err != nil {
				t.Fatal(err)
			}
			ref, err := llamacppLogits(dp, ollamaTokens, c.Vocab)
			if err != nil {
				t.Fatal(err)
			}
			dOurs, dRef := relDist(ours, ref), relDist(lq, ref)
			t.Logf("generated gpt-oss %s: engine %.3g, llama.cpp quantized %.3g from the dequantized-F32 reference", ty.name, dOurs, dRef)
			if dOurs > max(1.25*dRef, 1e-4) {
				t.Errorf("engine is %.3g from the reference, llama.cpp's quantized kernels %.3g", dOurs, dRef)
			}
		})
	}
}
