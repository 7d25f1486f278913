package refcheck

import (
	"errors"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stratanet/strata/engine"
)

// ollama's loader and ggml's log sink log each load at INFO through slog;
// warnings and errors still show.
func init() {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
}

// ollamaShapes are the generated shapes whose architecture ollama v0.17.4
// implements itself (it has no phi3).
var ollamaShapes = []string{"llama-mha", "llama-gqa", "llama3.1-rope-freqs", "qwen2", "qwen3"}

var ollamaTokens = []int32{1, 40, 300, 7, 99, 260, 5, 120, 33, 444, 17, 2, 301, 302, 303, 500}

// TestLogitsMatchOllama: the engine's logits match those of ollama's own
// implementation of each architecture within 1e-4 relative, F32 weights.
// It is a second oracle beside TestLogitsMatchGGML: there the graph is ours
// (after llama.cpp's), here the graph, its RoPE, norm and attention choices
// are ollama's; both run ggml's CPU kernels.
func TestLogitsMatchOllama(t *testing.T) {
	for _, name := range ollamaShapes {
		c := shapes[name]
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), name+".gguf")
			if err := engine.GenerateFile(path, c); err != nil {
				t.Fatal(err)
			}
			ref, err := ollamaLogits(path, ollamaTokens)
			if err != nil {
				t.Fatal(err)
			}
			if len(ref) != c.Vocab {
				t.Fatalf("ollama returned %d logits, want %d", len(ref), c.Vocab)
			}
			got := engineLogits(t, path, ollamaTokens)
			raw, err := ggmlLogits(path, c, ollamaTokens)
			if err != nil {
				t.Fatal(err)
			}
			d, dRaw := relDist(got, ref), relDist(raw, ref)
			t.Logf("%s: engine %.3g, our raw ggml graph %.3g relative from ollama", name, d, dRaw)
			if !(d <= 1e-4) {
				t.Errorf("engine deviates from ollama by %.3g relative (limit 1e-4)", d)
			}
		})
	}
}

// TestQuantizedLogitsOllama runs Q8_0 and Q4_K_M files that ggml's
// quantizer wrote through ollama: the tight reference is ollama's forward
// on the same weights dequantised by ggml, and the engine must be as close
// to it as ollama's own quantized forward is (1.25×, as in
// TestQuantizedLogits, for the same reason: activation rounding).
func TestQuantizedLogitsOllama(t *testing.T) {
	qshapes := map[string]engine.GenConfig{
		"llama-gqa-256": {Arch: "llama", Layers: 2, Dim: 256, Heads: 4, KVHeads: 2, FFN: 512, Vocab: 512, Seed: 21, RopeBase: 10000, NormEps: 1e-5},
		"qwen2-256":     {Arch: "qwen2", Layers: 2, Dim: 256, Heads: 4, KVHeads: 2, FFN: 768, Vocab: 640, Seed: 22, RopeBase: 1e6, NormEps: 1e-6},
		"qwen3-256":     {Arch: "qwen3", Layers: 2, Dim: 256, Heads: 4, KVHeads: 2, HeadDim: 128, FFN: 768, Vocab: 640, Seed: 25, RopeBase: 1e6, NormEps: 1e-6},
	}
	mixes := []struct {
		name string
		pick func(string, int) engine.DType
	}{
		{"q8_0", func(string, int) engine.DType { return engine.Q8_0 }},
		{"q4_k_m", q4KM},
	}
	dir := t.TempDir()
	for sname, c := range qshapes {
		src := filepath.Join(dir, sname+".gguf")
		if err := engine.GenerateFile(src, c); err != nil {
			t.Fatal(err)
		}
		for _, m := range mixes {
			t.Run(sname+"/"+m.name, func(t *testing.T) {
				qp, dp := filepath.Join(dir, sname+"-"+m.name+".gguf"), filepath.Join(dir, sname+"-"+m.name+"-deq.gguf")
				if err := quantizeModel(src, qp, dp, m.pick); err != nil {
					t.Fatal(err)
				}
				ref, err := ollamaLogits(dp, ollamaTokens)
				if err != nil {
					t.Fatal(err)
				}
				oq, err := ollamaLogits(qp, ollamaTokens)
				if err != nil {
					t.Fatal(err)
				}
				ours := engineLogits(t, qp, ollamaTokens)
				dOurs, dOllama := relDist(ours, ref), relDist(oq, ref)
				t.Logf("%s %s: engine %.4g, ollama quantized %.4g from ollama's dequantized-F32 reference", sname, m.name, dOurs, dOllama)
				if dOllama == 0 {
					t.Errorf("ollama's quantized forward equals its F32 one: the file was not quantized")
				}
				if dOurs > max(1.25*dOllama, 1e-4) {
					t.Errorf("engine is %.3g from the reference, ollama's quantized forward %.3g", dOurs, dOllama)
				}
			})
		}
	}
}

// TestOllamaLogitsDependOnInput guards the oracle itself: another last
// token, or the same tokens in another order, must change ollama's logits
// (a forward that ignored its batch or positions would pass the others).
func TestOllamaLogitsDependOnInput(t *testing.T) {
	c := shapes["llama-gqa"]
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := engine.GenerateFile(path, c); err != nil {
		t.Fatal(err)
	}
	base, err := ollamaLogits(path, []int32{1, 40, 300, 7})
	if err != nil {
		t.Fatal(err)
	}
	for _, toks := range [][]int32{{1, 40, 300, 8}, {1, 300, 40, 7}} {
		other, err := ollamaLogits(path, toks)
		if err != nil {
			t.Fatal(err)
		}
		if d := relDist(other, base); !(d > 1e-3) || math.IsNaN(d) {
			t.Errorf("tokens %v: logits %.3g relative from %v's", toks, d, []int32{1, 40, 300, 7})
		}
	}
	if _, err := ollamaLogits(path, nil); err == nil {
		t.Error("no tokens: no error")
	}
	if _, err := ollamaLogits(filepath.Join(t.TempDir(), "absent.gguf"), []int32{1}); err == nil {
		t.Error("absent file: no error")
	}
}

// TestOllamaLogitsMissingTensor: a file without a tensor ollama's loader
// wants is an error from ollamaLogits, not a crash of the test binary.
func TestOllamaLogitsMissingTensor(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "m.gguf")
	if err := engine.GenerateFile(src, shapes["llama-gqa"]); err != nil {
		t.Fatal(err)
	}
	f, fh, err := engine.OpenFile(src)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var ts []engine.WriteTensor
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		if ti.Name == "blk.1.attn_norm.weight" {
			continue
		}
		raw := make([]byte, ti.Size)
		if err := f.ReadTensor(ti, raw); err != nil {
			t.Fatal(err)
		}
		ts = append(ts, engine.WriteTensor{Name: ti.Name, Dims: ti.Dims, Type: ti.Type, Data: writeBytes(raw)})
	}
	bad := filepath.Join(dir, "bad.gguf")
	if err := writeFile(bad, f.KV, ts); err != nil {
		t.Fatal(err)
	}
	_, err = ollamaLogits(bad, ollamaTokens)
	t.Logf("without blk.1.attn_norm.weight: %v", err)
	if !errors.Is(err, errOllamaPanic) {
		t.Errorf("got %v, want an error wrapping errOllamaPanic", err)
	}
}
