package engine

import (
	"bytes"

	"testing"
)

// tinyModel is a complete, valid model small enough to fuzz: one layer,
// dim 4, a 10-token vocabulary (phi3: with LongRoPE factors).
func tinyModel(arch string) ([]KV, []WriteTensor) {
	toks := []string{"<unk>", "<s>", "</s>", "a", "b", "▁a", "ab", "▁", "c", "<0x41>"}
	types := []int32{2, 3, 3, 1, 1, 1, 1, 1, 1, 6}
	kvs := []KV{
		{"general.architecture", arch}, {"general.name", "tiny"},
		{arch + ".block_count", uint32(1)}, {arch + ".embedding_length", uint32(4)},
		{arch + ".attention.head_count", uint32(2)}, {arch + ".attention.head_count_kv", uint32(1)},
		{arch + ".feed_forward_length", uint32(4)}, {arch + ".context_length", uint32(16)},
		{arch + ".rope.freq_base", float32(10000)}, {arch + ".attention.layer_norm_rms_epsilon", float32(1e-5)},
		{"tokenizer.ggml.model", "llama"}, {"tokenizer.ggml.tokens", toks},
		{"tokenizer.ggml.scores", make([]float32, 10)}, {"tokenizer.ggml.token_type", types},
		{"tokenizer.ggml.bos_token_id", uint32(1)}, {"tokenizer.ggml.eos_token_id", uint32(2)},
	}
	var ts []WriteTensor
	add := func(name string, dims ...uint64) {
		ts = append(ts, randTensor(name, dims, F32, 1, 0.5, 0))
	}
	add("token_embd.weight", 4, 10)
	add("blk.0.attn_norm.weight", 4)
	if arch == "phi3" {
		// Fused Q/K/V and gate+up, LongRoPE factors (head size 2: one each).
		kvs = append(kvs, KV{arch + ".rope.scaling.original_context_length", uint32(8)},
			KV{arch + ".rope.scaling.attn_factor", float32(1.2)}, KV{arch + ".attention.sliding_window", uint32(7)})
		add("rope_factors_short.weight", 1)
		add("rope_factors_long.weight", 1)
		add("blk.0.attn_qkv.weight", 4, 8)
	} else {
		add("blk.0.attn_q.weight", 4, 4)
		add("blk.0.attn_k.weight", 4, 2)
		add("blk.0.attn_v.weight", 4, 2)
	}
	if arch == "qwen2" {
		add("blk.0.attn_q.bias", 4)
		add("blk.0.attn_k.bias", 2)
		add("blk.0.attn_v.bias", 2)
	}
	add("blk.0.attn_output.weight", 4, 4)
	add("blk.0.ffn_norm.weight", 4)
	if arch == "phi3" {
		add("blk.0.ffn_up.weight", 4, 8)
	} else {
		add("blk.0.ffn_gate.weight", 4, 4)
		add("blk.0.ffn_up.weight", 4, 4)
	}
	add("blk.0.ffn_down.weight", 4, 4)
	add("output_norm.weight", 4)
	return kvs, ts
}

// FuzzReadFile feeds arbitrary bytes to the GGUF decoder and, when the
// header parses, to the whole load path: errors are fine, panics are not.
// Seeds: testdata/fuzz/FuzzReadFile plus the tiny models below.
func FuzzReadFile(f *testing.F) {
	for _, arch := range []string{"llama", "qwen2", "phi3"} {
		var b bytes.Buffer
		kvs, ts := tinyModel(arch)
		if err := WriteGGUF(&b, kvs, ts); err != nil {
			f.Fatal(err)
		}
		f.Add(b.Bytes())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		file, err := ReadFile(r, int64(len(data)))
		if err != nil {
			return
		}
		_, _ = file.Fingerprint()
		if tok, err := NewTokenizer(file); err == nil {
			tok.Decode(tok.Encode("a b ab c", true, true))
		}
		if s, err := OpenReaderAt(r, int64(len(data)), WithThreads(1)); err == nil {
			fuzzStep(t, s)
		}
	})
}

// TestTinyModelsRun keeps the fuzz seeds honest: they are valid models.
func TestTinyModelsRun(t *testing.T) {
	for _, arch := range []string{"llama", "qwen2", "phi3"} {
		var b bytes.Buffer
		kvs, ts := tinyModel(arch)
		if err := WriteGGUF(&b, kvs, ts); err != nil {
			t.Fatal(err)
		}
		s, err := OpenReaderAt(bytes.NewReader(b.Bytes()), int64(b.Len()))
		if err != nil {
			t.Fatal(arch, err)
		}
		ss, _ := s.NewSession(4)
		out, err := s.Forward(t.Context(), Step{Session: ss, Tokens: []int32{1, 3}})
		if err != nil || len(out.Logits) != 10 {
			t.Fatal(arch, err)
		}
		s.Close()
	}
}

// fuzzStep runs one small step on a stage a fuzz input loaded (only a
// tiny one: a fuzzed shape may ask for gigabytes), then closes it. Errors
// are fine; a panic or a hang is not.
func fuzzStep(t *testing.T, s *Local) {
	defer s.Close()
	if s.Info().Context > 64 || s.Info().Hidden > 64 {
		return
	}
	ss, err := s.NewSession(4)
	if err != nil {
		return
	}
	_, _ = s.Forward(t.Context(), Step{Session: ss, Tokens: []int32{1, 2}})
}
