package refcheck

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stratanet/strata/engine"
)

// TestGemma3RunsInOllama: ollama's own gemma3 loads a file from
// engine.GenerateGemma3 (llama.cpp's keys and tensor names, no vision
// tensors) and runs it: finite logits, one per token of the vocabulary,
// bitwise equal across two loads, and they move with the input. A sliding
// window shorter than the prompt changes the logits, so ollama reads the
// window from the file and its local layers use it.
func TestGemma3RunsInOllama(t *testing.T) {
	dir := t.TempDir()
	// Six layers: five local (sliding-window) layers and one global one.
	c := engine.Gemma3Config{Layers: 6, Dim: 128, Heads: 4, KVHeads: 2, HeadDim: 64, FFN: 256, Vocab: 600, Seed: 31, SlidingWindow: 4}
	path := filepath.Join(dir, "gemma3.gguf")
	if err := engine.GenerateGemma3File(path, c); err != nil {
		t.Fatal(err)
	}
	a, err := ollamaLogits(path, ollamaTokens)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != c.Vocab {
		t.Fatalf("ollama returned %d logits, want %d", len(a), c.Vocab)
	}
	scale := 0.0
	for i, x := range a {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			t.Fatalf("logit %d is %g", i, x)
		}
		scale = math.Max(scale, math.Abs(float64(x)))
	}
	b, err := ollamaLogits(path, ollamaTokens)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			t.Fatalf("logit %d: %g, then %g on a second run", i, a[i], b[i])
		}
	}
	other := append([]int32{}, ollamaTokens...)
	other[len(other)-1] = 499
	o, err := ollamaLogits(path, other)
	if err != nil {
		t.Fatal(err)
	}
	wide := c
	wide.SlidingWindow = 512
	widePath := filepath.Join(dir, "gemma3-wide.gguf")
	if err := engine.GenerateGemma3File(widePath, wide); err != nil {
		t.Fatal(err)
	}
	w, err := ollamaLogits(widePath, ollamaTokens)
	if err != nil {
		t.Fatal(err)
	}
	dTok, dWin := relDist(o, a), relDist(w, a)
	t.Logf("gemma3: max |logit| %.3g; another last token moves them %.3g, a 512 window instead of 4 %.3g relative", scale, dTok, dWin)
	if !(dTok > 1e-3) {
		t.Errorf("another last token moved the logits only %.3g relative", dTok)
	}
	if !(dWin > 1e-3) {
		t.Errorf("the sliding window moved the logits only %.3g relative: ollama did not use it", dWin)
	}
}

// TestGemma3FileReadByGGML: ggml's own gguf reader parses the generated
// file, with every tensor llama.cpp's gemma3 loader needs and no others.
func TestGemma3FileReadByGGML(t *testing.T) {
	c := engine.Gemma3Config{Layers: 2, Dim: 64, Heads: 2, KVHeads: 1, HeadDim: 32, FFN: 128, Vocab: 300, Seed: 32}
	path := filepath.Join(t.TempDir(), "gemma3.gguf")
	if err := engine.GenerateGemma3File(path, c); err != nil {
		t.Fatal(err)
	}
	f, err := readGGUF(path, "gemma3.attention.sliding_window", "gemma3.block_count")
	if err != nil {
		t.Fatal(err)
	}
	if kv := f.KV["gemma3.attention.sliding_window"]; kv.Type != 4 || kv.Value != 512 { // GGUF_TYPE_UINT32
		t.Errorf("sliding_window: %+v, want a uint32 512 (the default)", kv)
	}
	want := map[string]bool{"token_embd.weight": true, "output_norm.weight": true}
	for l := range c.Layers {
		for _, n := range []string{"attn_norm", "attn_q", "attn_k", "attn_v", "attn_q_norm", "attn_k_norm", "attn_output",
			"post_attention_norm", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down", "post_ffw_norm"} {
			want[fmt.Sprintf("blk.%d.%s.weight", l, n)] = true
		}
	}
	for _, ti := range f.Tensors {
		if !want[ti.Name] {
			t.Errorf("unexpected tensor %s", ti.Name)
		}
		delete(want, ti.Name)
	}
	for n := range want {
		t.Errorf("missing tensor %s", n)
	}
	// Deterministic: the same config gives the same bytes.
	again := filepath.Join(t.TempDir(), "again.gguf")
	if err := engine.GenerateGemma3File(again, c); err != nil {
		t.Fatal(err)
	}
	x, _ := os.ReadFile(path)
	y, _ := os.ReadFile(again)
	if !bytes.Equal(x, y) {
		t.Error("two files from one config differ")
	}
}

// TestGemma3OllamaMatchesGGMLGraph compares ollama's gemma3 with our raw
// ggml graph after llama.cpp's gemma3, on generated files. They agree within
// 1e-5 relative when the window covers the prompt. With a window shorter
// than the prompt, ollama's local layers see one key more than llama.cpp's
// (its kvcache masks a key only when query − key > window; llama.cpp's
// is_masked_swa when query − key >= window), so the graph matches ollama
// only when it keeps window+1 keys. It also measures how far an exact F32
// GELU lands from ggml's F16-table GELU.
func TestGemma3OllamaMatchesGGMLGraph(t *testing.T) {
	dir := t.TempDir()
	for _, window := range []int{4, 512} {
		c := engine.Gemma3Config{Layers: 6, Dim: 128, Heads: 4, KVHeads: 2, HeadDim: 64, FFN: 256, Vocab: 600, Seed: 33, SlidingWindow: window}
		path := filepath.Join(dir, fmt.Sprintf("gemma3-w%d.gguf", window))
		if err := engine.GenerateGemma3File(path, c); err != nil {
			t.Fatal(err)
		}
		ref, err := ollamaLogits(path, ollamaTokens)
		if err != nil {
			t.Fatal(err)
		}
		graph := func(o gemma3Opts) float64 {
			got, err := ggmlGemma3Logits(path, c, ollamaTokens, o)
			if err != nil {
				t.Fatal(err)
			}
			return relDist(got, ref)
		}
		dLlama, dWide, dExact := graph(gemma3Opts{keep: window}), graph(gemma3Opts{keep: window + 1}), graph(gemma3Opts{keep: window + 1, exactGELU: true})
		t.Logf("window %d, %d tokens: graph with llama.cpp's window %.3g, with window+1 %.3g, with window+1 and exact GELU %.3g relative from ollama",
			window, len(ollamaTokens), dLlama, dWide, dExact)
		if !(dWide <= 1e-5) {
			t.Errorf("window %d: graph keeping window+1 keys is %.3g from ollama (limit 1e-5)", window, dWide)
		}
		if window >= len(ollamaTokens) && !(dLlama <= 1e-5) {
			t.Errorf("window %d covers the prompt, yet llama.cpp's graph is %.3g from ollama", window, dLlama)
		}
		if window < len(ollamaTokens) && !(dLlama > 1e-3) {
			t.Errorf("window %d: llama.cpp's window is only %.3g from ollama's: the off-by-one is gone; update docs/refcheck.md", window, dLlama)
		}
	}
}

// TestGemma3QuantizedOllama measures, for the engine's gemma3, the
// bound the quantized refcheck rule will set: ollama's quantized forward
// on ggml-quantized Q8_0 and Q4_K_M gemma3 files, from ollama's forward on
// the same weights dequantised to F32. Each must be finite and non-zero
// (the file really was quantized).
func TestGemma3QuantizedOllama(t *testing.T) {
	dir := t.TempDir()
	c := engine.Gemma3Config{Layers: 6, Dim: 256, Heads: 4, KVHeads: 2, HeadDim: 64, FFN: 512, Vocab: 512, Seed: 34, SlidingWindow: 8}
	src := filepath.Join(dir, "gemma3.gguf")
	if err := engine.GenerateGemma3File(src, c); err != nil {
		t.Fatal(err)
	}
	for name, pick := range map[string]func(string, int) engine.DType{
		"q8_0":   func(string, int) engine.DType { return engine.Q8_0 },
		"q4_k_m": q4KM,
	} {
		qp, dp := filepath.Join(dir, name+".gguf"), filepath.Join(dir, name+"-deq.gguf")
		if err := quantizeModel(src, qp, dp, pick); err != nil {
			t.Fatal(err)
		}
		ref, err := ollamaLogits(dp, ollamaTokens)
		if err != nil {
			t.Fatal(err)
		}
		q, err := ollamaLogits(qp, ollamaTokens)
		if err != nil {
			t.Fatal(err)
		}
		d := relDist(q, ref)
		t.Logf("gemma3 %s: ollama quantized %.4g from ollama's dequantized-F32 reference", name, d)
		if !(d > 0) || math.IsInf(d, 0) || math.IsNaN(d) {
			t.Errorf("%s: distance %g", name, d)
		}
	}
}
