package refcheck

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stratanet/strata/engine"
)

// deepseek2Shape is a tiny DeepSeek-V2/V3-like attention (Q and KV
// LoRA), every layer dense. llama.cpp takes a Q LoRA for every layer count
// but 26 and 27 (its "lite" models).
type deepseek2Shape struct {
	layers, dim, heads, nope, rope, qLora, kvLora, vHead, ffn int
}

// writeDeepSeek2 writes a deepseek2 file with random weights (the same for
// the same shape, whatever the layout). mla false: ollama's own layout
// (its converter): attn_kv_b, key_length = nope+rope, head_count_kv = heads.
// mla true: llama.cpp's MLA layout: attn_k_b and attn_v_b cut from the
// same kv_b, key_length = kv_lora+rope (or keyLength when non-zero),
// value_length = kv_lora, key_length_mla = nope+rope, value_length_mla,
// head_count_kv = 1.
func writeDeepSeek2(path string, s deepseek2Shape, tokenizer []engine.KV, vocab int, mla bool, keyLength int) error {
	const a = "deepseek2."
	u := func(v int) uint32 { return uint32(v) }
	kvs := []engine.KV{
		{Key: "general.architecture", Value: "deepseek2"},
		{Key: "general.name", Value: "strata-random-deepseek2"},
		{Key: a + "block_count", Value: u(s.layers)},
		{Key: a + "leading_dense_block_count", Value: u(s.layers)},
		{Key: a + "context_length", Value: u(2048)},
		{Key: a + "embedding_length", Value: u(s.dim)},
		{Key: a + "feed_forward_length", Value: u(s.ffn)},
		{Key: a + "attention.head_count", Value: u(s.heads)},
		{Key: a + "attention.q_lora_rank", Value: u(s.qLora)},
		{Key: a + "attention.kv_lora_rank", Value: u(s.kvLora)},
		{Key: a + "attention.layer_norm_rms_epsilon", Value: float32(1e-6)},
		{Key: a + "rope.dimension_count", Value: u(s.rope)},
		{Key: a + "rope.freq_base", Value: float32(10000)},
		{Key: a + "rope.scaling.factor", Value: float32(1)},
		{Key: a + "expert_count", Value: u(0)},
		{Key: a + "expert_used_count", Value: u(0)},
		// llama.cpp requires these even when every layer is dense.
		{Key: a + "expert_feed_forward_length", Value: u(s.ffn)},
		{Key: a + "expert_shared_count", Value: u(1)},
		{Key: a + "expert_weights_scale", Value: float32(1)},
	}
	if mla {
		kl := s.kvLora + s.rope
		if keyLength != 0 {
			kl = keyLength
		}
		kvs = append(kvs, engine.KV{Key: a + "attention.head_count_kv", Value: u(1)},
			engine.KV{Key: a + "attention.key_length", Value: u(kl)},
			engine.KV{Key: a + "attention.value_length", Value: u(s.kvLora)},
			engine.KV{Key: a + "attention.key_length_mla", Value: u(s.nope + s.rope)},
			engine.KV{Key: a + "attention.value_length_mla", Value: u(s.vHead)})
	} else {
		kvs = append(kvs, engine.KV{Key: a + "attention.head_count_kv", Value: u(s.heads)},
			engine.KV{Key: a + "attention.key_length", Value: u(s.nope + s.rope)},
			engine.KV{Key: a + "attention.value_length", Value: u(s.vHead)})
	}
	kvs = append(kvs, tokenizer...)

	seed := uint64(50)
	rnd := func(n, cols int) []float32 {
		seed++
		x := randomValues(n, seed)
		for i := range x {
			x[i] /= 4 * float32(math.Sqrt(float64(cols)))
		}
		return x
	}
	norm := func(n int) []float32 {
		x := rnd(n, 1)
		for i := range x {
			x[i] = 1 + x[i]/4
		}
		return x
	}
	var ts []engine.WriteTensor
	add := func(name string, v []float32, dims ...uint64) {
		ts = append(ts, engine.WriteTensor{Name: name, Dims: dims, Type: engine.F32, Data: writeBytes(f32Bytes(v))})
	}
	d, h, qk := uint64(s.dim), uint64(s.heads), uint64(s.nope+s.rope)
	add("token_embd.weight", rnd(s.dim*vocab, 1), d, uint64(vocab))
	for l := range s.layers {
		p := fmt.Sprintf("blk.%d.", l)
		add(p+"attn_norm.weight", norm(s.dim), d)
		add(p+"attn_q_a.weight", rnd(s.dim*s.qLora, s.dim), d, uint64(s.qLora))
		add(p+"attn_q_a_norm.weight", norm(s.qLora), uint64(s.qLora))
		add(p+"attn_q_b.weight", rnd(s.qLora*s.heads*int(qk), s.qLora), uint64(s.qLora), h*qk)
		add(p+"attn_kv_a_mqa.weight", rnd(s.dim*(s.kvLora+s.rope), s.dim), d, uint64(s.kvLora+s.rope))
		add(p+"attn_kv_a_norm.weight", norm(s.kvLora), uint64(s.kvLora))
		// kv_b: rows h·(nope+v)+i, nope rows (K) then v rows (V) per head.
		per := s.nope + s.vHead
		kvb := rnd(s.kvLora*s.heads*per, s.kvLora)
		if !mla {
			add(p+"attn_kv_b.weight", kvb, uint64(s.kvLora), h*uint64(per))
		} else {
			// k_b[n, l, h] = kv_b[row h·per+n][l]; v_b[l, j, h] = kv_b[row h·per+nope+j][l].
			kb := make([]float32, 0, s.nope*s.kvLora*s.heads)
			vb := make([]float32, 0, s.kvLora*s.vHead*s.heads)
			for hh := range s.heads {
				for ll := range s.kvLora {
					for n := range s.nope {
						kb = append(kb, kvb[(hh*per+n)*s.kvLora+ll])
					}
				}
				for j := range s.vHead {
					vb = append(vb, kvb[(hh*per+s.nope+j)*s.kvLora:(hh*per+s.nope+j+1)*s.kvLora]...)
				}
			}
			add(p+"attn_k_b.weight", kb, uint64(s.nope), uint64(s.kvLora), h)
			add(p+"attn_v_b.weight", vb, uint64(s.kvLora), uint64(s.vHead), h)
		}
		add(p+"attn_output.weight", rnd(s.heads*s.vHead*s.dim, s.heads*s.vHead), h*uint64(s.vHead), d)
		add(p+"ffn_norm.weight", norm(s.dim), d)
		add(p+"ffn_gate.weight", rnd(s.dim*s.ffn, s.dim), d, uint64(s.ffn))
		add(p+"ffn_up.weight", rnd(s.dim*s.ffn, s.dim), d, uint64(s.ffn))
		add(p+"ffn_down.weight", rnd(s.ffn*s.dim, s.ffn), uint64(s.ffn), d)
	}
	add("output_norm.weight", norm(s.dim), d)
	add("output.weight", rnd(s.dim*vocab, s.dim), d, uint64(vocab))
	return writeFile(path, kvs, ts)
}

// TestDeepSeek2MLAScaleOllama measures ollama's deepseek2 on the two file
// layouts of one set of weights. Its non-MLA path (ollama's converter's
// layout, attn_kv_b, Q·K scaled by 1/√(nope+rope)) and its MLA path on a
// file whose attention.key_length is nope+rope compute the same attention,
// absorbed or not, and must agree. On llama.cpp's MLA layout
// (key_length = kv_lora+rope, key_length_mla = nope+rope) ollama scales Q·K
// by 1/√key_length, where llama.cpp's deepseek2 graph uses
// 1/√key_length_mla: ollama's logits then move away from the non-MLA ones.
func TestDeepSeek2MLAScaleOllama(t *testing.T) {
	dir := t.TempDir()
	const vocab = 600
	tok := deepseekTokenizer(t, dir, vocab)
	s := deepseek2Shape{layers: 2, dim: 64, heads: 4, nope: 16, rope: 16, qLora: 48, kvLora: 32, vHead: 16, ffn: 128}
	run := func(name string, mla bool, keyLength int) []float32 {
		path := filepath.Join(dir, name+".gguf")
		if err := writeDeepSeek2(path, s, tok, vocab, mla, keyLength); err != nil {
			t.Fatal(err)
		}
		out, err := ollamaLogits(path, ollamaTokens)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return out
	}
	plain := run("kv_b", false, 0)
	mlaOwn := run("mla-keylen-qk", true, s.nope+s.rope)
	mlaLlama := run("mla-llamacpp", true, 0)
	dOwn, dLlama := relDist(mlaOwn, plain), relDist(mlaLlama, plain)
	t.Logf("deepseek2 MLA vs non-MLA in ollama: key_length %d (nope+rope) %.3g; key_length %d (llama.cpp's kv_lora+rope) %.3g relative",
		s.nope+s.rope, dOwn, s.kvLora+s.rope, dLlama)
	if !(dOwn <= 1e-5) {
		t.Errorf("ollama's MLA path with key_length = nope+rope is %.3g from its non-MLA path (limit 1e-5)", dOwn)
	}
	if !(dLlama > 1e-3) {
		t.Errorf("ollama's MLA path on llama.cpp's key_length is only %.3g from its non-MLA path: the scale disagreement is gone; update docs/refcheck.md", dLlama)
	}
}

// deepseekTokenizer is a generated BPE vocabulary's tokenizer metadata with
// the pre-tokenizer ollama's deepseek2 insists on.
func deepseekTokenizer(t *testing.T, dir string, vocab int) []engine.KV {
	t.Helper()
	src := filepath.Join(dir, "vocab.gguf")
	if err := engine.GenerateFile(src, engine.GenConfig{Arch: "qwen2", Layers: 1, Dim: 64, Heads: 2, FFN: 64, Vocab: vocab, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	f, fh, err := engine.OpenFile(src)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var tok []engine.KV
	for _, kv := range f.KV {
		if strings.HasPrefix(kv.Key, "tokenizer.") {
			if kv.Key == "tokenizer.ggml.pre" {
				kv.Value = "deepseek-v3" // ollama's deepseek2 takes no other
			}
			tok = append(tok, kv)
		}
	}
	return tok
}
