package refcheck

import (
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stratanet/strata/engine"
)

// qwen3MoEFromDense rewrites the F32 qwen3 file at src as a qwen3moe file
// with llama.cpp's keys and tensor names: experts experts of which used
// are routed per token, each expert e's gate, up and down being the dense
// layer's times scale(e), and a random router (ffn_gate_inp).
func qwen3MoEFromDense(src, dst string, experts, used int, scale func(e int) float32) error {
	f, fh, err := engine.OpenFile(src)
	if err != nil {
		return err
	}
	defer fh.Close()
	var kvs []engine.KV
	for _, kv := range f.KV {
		switch {
		case kv.Key == "general.architecture":
			kv.Value = "qwen3moe"
		case strings.HasPrefix(kv.Key, "qwen3."):
			kv.Key = "qwen3moe." + strings.TrimPrefix(kv.Key, "qwen3.")
		}
		kvs = append(kvs, kv)
	}
	ffn, err := f.Uint("qwen3.feed_forward_length")
	if err != nil {
		return err
	}
	kvs = append(kvs, engine.KV{Key: "qwen3moe.expert_count", Value: uint32(experts)},
		engine.KV{Key: "qwen3moe.expert_used_count", Value: uint32(used)},
		engine.KV{Key: "qwen3moe.expert_feed_forward_length", Value: uint32(ffn)})
	var ts []engine.WriteTensor
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		raw := make([]byte, ti.Size)
		if err := f.ReadTensor(ti, raw); err != nil {
			return err
		}
		var layer int
		var kind string
		if _, err := fmt.Sscanf(ti.Name, "blk.%d.ffn_%s", &layer, &kind); err != nil || !strings.HasSuffix(kind, ".weight") {
			ts = append(ts, engine.WriteTensor{Name: ti.Name, Dims: ti.Dims, Type: ti.Type, Data: writeBytes(raw)})
			continue
		}
		kind = strings.TrimSuffix(kind, ".weight")
		if kind == "norm" {
			ts = append(ts, engine.WriteTensor{Name: ti.Name, Dims: ti.Dims, Type: ti.Type, Data: writeBytes(raw)})
			continue
		}
		// ffn_gate, ffn_up, ffn_down: one slice per expert, [cols, rows, experts].
		n := int(ti.Elements())
		vals := make([]float32, 0, n*experts)
		for e := range experts {
			s := scale(e)
			for j := range n {
				vals = append(vals, s*math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:])))
			}
		}
		ts = append(ts, engine.WriteTensor{Name: fmt.Sprintf("blk.%d.ffn_%s_exps.weight", layer, kind),
			Dims: []uint64{ti.Dims[0], ti.Dims[1], uint64(experts)}, Type: engine.F32, Data: writeBytes(f32Bytes(vals))})
		if kind == "gate" {
			dim := int(ti.Dims[0])
			router := randomValues(dim*experts, uint64(1000+layer))
			for j := range router {
				router[j] /= float32(math.Sqrt(float64(dim)))
			}
			ts = append(ts, engine.WriteTensor{Name: fmt.Sprintf("blk.%d.ffn_gate_inp.weight", layer),
				Dims: []uint64{uint64(dim), uint64(experts)}, Type: engine.F32, Data: writeBytes(f32Bytes(router))})
		}
	}
	return writeFile(dst, kvs, ts)
}

// TestQwen3MoEInOllama: ollama's qwen3moe loads files with llama.cpp's
// qwen3moe keys and tensor names. With every expert a copy of the dense
// FFN, routing top-2 of 4 must give the dense model's logits (ollama's
// qwen3, which the engine matches within 1e-4): that holds only if the
// routed weights are renormalised to sum to 1 and the expert tensors are
// laid out as written. With experts scaled differently the logits move
// and stay deterministic. llama.cpp's own qwen3moe must agree on both.
func TestQwen3MoEInOllama(t *testing.T) {
	dir := t.TempDir()
	c := engine.GenConfig{Arch: "qwen3", Layers: 2, Dim: 128, Heads: 4, KVHeads: 2, HeadDim: 32, FFN: 192, Vocab: 600, Seed: 41}
	dense := filepath.Join(dir, "qwen3.gguf")
	if err := engine.GenerateFile(dense, c); err != nil {
		t.Fatal(err)
	}
	ref, err := ollamaLogits(dense, ollamaTokens)
	if err != nil {
		t.Fatal(err)
	}
	same := filepath.Join(dir, "same.gguf")
	if err := qwen3MoEFromDense(dense, same, 4, 2, func(int) float32 { return 1 }); err != nil {
		t.Fatal(err)
	}
	got, err := ollamaLogits(same, ollamaTokens)
	if err != nil {
		t.Fatal(err)
	}
	dSame := relDist(got, ref)
	mixed := filepath.Join(dir, "mixed.gguf")
	if err := qwen3MoEFromDense(dense, mixed, 4, 2, func(e int) float32 { return 0.6 + 0.3*float32(e) }); err != nil {
		t.Fatal(err)
	}
	m1, err := ollamaLogits(mixed, ollamaTokens)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := ollamaLogits(mixed, ollamaTokens)
	if err != nil {
		t.Fatal(err)
	}
	dMixed := relDist(m1, ref)
	t.Logf("qwen3moe, identical experts: %.3g from dense qwen3; experts scaled 0.6–1.5: %.3g", dSame, dMixed)
	if !(dSame <= 1e-5) {
		t.Errorf("identical experts are %.3g from the dense model (limit 1e-5)", dSame)
	}
	if !(dMixed > 1e-3) {
		t.Errorf("distinct experts moved the logits only %.3g", dMixed)
	}
	if d := relDist(m1, m2); d != 0 {
		t.Errorf("two runs differ by %.3g", d)
	}
	// llama.cpp's own qwen3moe on the same files.
	for name, f := range map[string][]float32{same: got, mixed: m1} {
		lc, err := llamacppLogits(name, ollamaTokens, c.Vocab)
		if err != nil {
			t.Fatal(err)
		}
		d := relDist(f, lc)
		t.Logf("%s: ollama %.3g relative from llama.cpp", filepath.Base(name), d)
		if !(d <= 1e-5) {
			t.Errorf("%s: ollama's qwen3moe is %.3g from llama.cpp's (limit 1e-5)", filepath.Base(name), d)
		}
	}
}

// TestMoELogitsMatchOllama: the engine's qwen3moe logits match ollama's
// own qwen3moe within 1e-4 relative, F32 weights: routing,
// renormalisation and the expert layout as ollama reads llama.cpp's names,
// not as our raw graph does. (ollama's llama has no experts: "model not
// supported"; Mixtral-style files are checked against the raw graph only.)
func TestMoELogitsMatchOllama(t *testing.T) {
	for _, name := range []string{"qwen3moe", "qwen3moe-top1"} {
		c := moeShapes[name]
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
			d := relDist(engineLogits(t, path, ollamaTokens), ref)
			t.Logf("%s: engine %.3g relative from ollama", name, d)
			if !(d <= 1e-4) {
				t.Errorf("engine deviates from ollama by %.3g relative (limit 1e-4)", d)
			}
		})
	}
}
