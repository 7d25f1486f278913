package engine

import (
	"fmt"
	"math"
)

// validateMoE checks the mixture-of-experts part of a generated model.
func (c GenConfig) validateMoE() error {
	bad := func(f string, v any) error { return fmt.Errorf("%w: generate %s: %s = %v", ErrShape, c.Arch, f, v) }
	switch {
	case (c.Arch == "qwen3moe" || c.Arch == "gpt-oss") && c.Experts <= 0:
		return bad("experts ("+c.Arch+" needs experts)", c.Experts)
	case c.Experts == 0:
		if c.ExpertsUsed != 0 || c.ExpertFFN != 0 {
			return bad("experts (needed by experts-used and expert-ffn)", c.Experts)
		}
		return nil
	case c.Arch != "llama" && c.Arch != "qwen3moe" && c.Arch != "gpt-oss":
		return bad("experts (only llama, qwen3moe and gpt-oss)", c.Experts)
	case c.Experts < 0 || c.Experts > maxExperts:
		return bad("experts", c.Experts)
	case c.ExpertsUsed <= 0 || c.ExpertsUsed > c.Experts:
		return bad("experts-used", c.ExpertsUsed)
	case c.Arch == "llama" && c.ExpertFFN != 0 && c.ExpertFFN != c.FFN:
		return bad("expert-ffn (a llama file's experts are ffn wide)", c.ExpertFFN)
	}
	ef := c.expertFFN()
	switch {
	case ef <= 0:
		return bad("expert-ffn", ef)
	case c.Mix != "" && ef%32 != 0:
		return bad("expert-ffn ("+c.Mix+" needs multiples of 32)", ef)
	case c.Mix == "" && ef%dtypes[c.DType].block != 0:
		return bad(fmt.Sprintf("expert-ffn (%s needs multiples of %d)", c.DType, dtypes[c.DType].block), ef)
	}
	return nil
}

// expertFFN is the experts' width: ExpertFFN, or FFN where it is unset.
func (c GenConfig) expertFFN() int {
	if c.ExpertFFN > 0 {
		return c.ExpertFFN
	}
	return c.FFN
}

// moeKVs are the metadata keys convert_hf_to_gguf.py writes for the
// experts: qwen3moe also writes the experts' width.
func (c GenConfig) moeKVs() []KV {
	if c.Experts == 0 {
		return nil
	}
	a := c.Arch
	kvs := []KV{{a + ".expert_count", uint32(c.Experts)}, {a + ".expert_used_count", uint32(c.ExpertsUsed)}}
	if a == "qwen3moe" || a == "gpt-oss" {
		kvs = append(kvs, KV{a + ".expert_feed_forward_length", uint32(c.expertFFN())})
	}
	return kvs
}

// moeTensors are layer p's router (F32, as convert_hf_to_gguf.py keeps
// ffn_gate_inp and llama-quantize leaves it) and its merged expert
// tensors, written by mat3 in the file's types.
func (c GenConfig) moeTensors(p string, add func(WriteTensor), mat3 func(name string, cols, rows, n uint64, scale float32)) {
	d, ef, ne := uint64(c.Dim), uint64(c.expertFFN()), uint64(c.Experts)
	s := 1 / float32(math.Sqrt(float64(c.Dim)))
	add(randTensor(p+"ffn_gate_inp.weight", []uint64{d, ne}, F32, c.Seed, s, 0))
	mat3(p+"ffn_gate_exps.weight", d, ef, ne, s)
	mat3(p+"ffn_up_exps.weight", d, ef, ne, s)
	mat3(p+"ffn_down_exps.weight", ef, d, ne, 1/float32(math.Sqrt(float64(ef))))
}

// gptossTensors are the rest of gpt-oss layer p after attn_output.weight,
// with llama.cpp's names (convert_hf_to_gguf.py's GptOssModel): the output
// bias, the attention sinks, post_attention_norm, the router with its bias
// and the experts with theirs. Vectors and biases are F32, as the
// converter writes them and llama-quantize leaves them.
func (c GenConfig) gptossTensors(p string, add func(WriteTensor), mat3 func(name string, cols, rows, n uint64, scale float32)) {
	d, ef, ne := uint64(c.Dim), uint64(c.expertFFN()), uint64(c.Experts)
	f32 := func(name string, dims []uint64, scale, bias float32) {
		add(randTensor(name, dims, F32, c.Seed, scale, bias))
	}
	f32(p+"attn_output.bias", []uint64{d}, 0.1, 0)
	f32(p+"attn_sinks.weight", []uint64{uint64(c.Heads)}, 1, 0)
	f32(p+"post_attention_norm.weight", []uint64{d}, 0.2, 1)
	s := 1 / float32(math.Sqrt(float64(c.Dim)))
	f32(p+"ffn_gate_inp.weight", []uint64{d, ne}, s, 0)
	f32(p+"ffn_gate_inp.bias", []uint64{ne}, 0.5, 0)
	mat3(p+"ffn_gate_exps.weight", d, ef, ne, s)
	f32(p+"ffn_gate_exps.bias", []uint64{ef, ne}, 0.1, 0)
	mat3(p+"ffn_up_exps.weight", d, ef, ne, s)
	f32(p+"ffn_up_exps.bias", []uint64{ef, ne}, 0.1, 0)
	mat3(p+"ffn_down_exps.weight", ef, d, ne, 1/float32(math.Sqrt(float64(ef))))
	f32(p+"ffn_down_exps.bias", []uint64{d, ne}, 0.1, 0)
}
