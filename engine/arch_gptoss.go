package engine

import "fmt"

// gpt-oss (llama.cpp's openai-moe-iswa graph): a pre-norm block with
// biases on Q, K, V and the output projection, NEOX RoPE (YaRN in the
// released models), attention sinks, a sliding window on the even layers
// (llama.cpp's swa pattern 2: layers 0, 2, … are local), and a mixture of
// experts after post_attention_norm with a biased router, weights from a
// softmax over the chosen experts' logits, biased experts and the clamped
// SwiGLU-OAI activation.
func init() {
	Register(&Arch{
		Name: "gpt-oss",
		Read: func(f *File, h *HParams) error {
			if !h.MoE() {
				return fmt.Errorf("%w: gpt-oss without %s.expert_count", ErrCorrupt, h.Arch)
			}
			h.NeoxRope, h.QKVBias = true, true
			w, err := uintKey(f, h.Arch+".attention.sliding_window", -1)
			if err != nil {
				return err
			}
			if w <= 0 {
				return fmt.Errorf("%w: key %q = %d", ErrCorrupt, h.Arch+".attention.sliding_window", w)
			}
			h.SlidingWindow = w
			return nil
		},
		Tensors: gptossTensors,
		Block:   gptossBlock,
		Experts: true,
	})
}

// gpt-oss's activation constants, as llama.cpp's build_moe_ffn fixes them
// for LLM_FFN_SWIGLU_OAI_MOE.
const (
	oaiAlpha = 1.702
	oaiLimit = 7.0
)

// gptossLocal reports whether layer li attends through the sliding window.
func gptossLocal(li int) bool { return li%2 == 0 }

func gptossTensors(h *HParams, _ int) []TensorSpec {
	d, qd, kv, e, ff := h.Dim, h.QDim(), h.KVDim(), h.Experts, h.ExpertFFN
	return []TensorSpec{
		{Name: "attn_norm.weight", Dims: []int{d}},
		{Name: "attn_q.weight", Dims: []int{d, qd}},
		{Name: "attn_k.weight", Dims: []int{d, kv}},
		{Name: "attn_v.weight", Dims: []int{d, kv}},
		{Name: "attn_q.bias", Dims: []int{qd}},
		{Name: "attn_k.bias", Dims: []int{kv}},
		{Name: "attn_v.bias", Dims: []int{kv}},
		{Name: "attn_output.weight", Dims: []int{qd, d}},
		{Name: "attn_output.bias", Dims: []int{d}},
		{Name: "attn_sinks.weight", Dims: []int{h.Heads}},
		{Name: "post_attention_norm.weight", Dims: []int{d}},
		{Name: "ffn_gate_inp.weight", Dims: []int{d, e}},
		{Name: "ffn_gate_inp.bias", Dims: []int{e}},
		{Name: "ffn_gate_exps.weight", Dims: []int{d, ff, e}},
		{Name: "ffn_up_exps.weight", Dims: []int{d, ff, e}},
		{Name: "ffn_down_exps.weight", Dims: []int{ff, d, e}},
		{Name: "ffn_gate_exps.bias", Dims: []int{ff, e}},
		{Name: "ffn_up_exps.bias", Dims: []int{ff, e}},
		{Name: "ffn_down_exps.bias", Dims: []int{d, e}},
	}
}

func gptossBlock(o Ops, l *Layer, x Tensor) Tensor {
	h := l.HP
	rope := standardRope(h)
	cur := o.RMSNorm(x, l.W("attn_norm.weight"), h.NormEps)
	qkv := o.Linears(cur, l.W("attn_q.weight"), l.W("attn_k.weight"), l.W("attn_v.weight"))
	q, k, v := o.AddBias(qkv[0], l.W("attn_q.bias")), o.AddBias(qkv[1], l.W("attn_k.bias")), o.AddBias(qkv[2], l.W("attn_v.bias"))
	q, k = o.Rope(q, rope), o.Rope(k, rope)
	a := Attn{Heads: h.Heads, KVHeads: h.KVHeads, HeadDim: h.HeadDim, Sinks: "attn_sinks.weight"}
	if gptossLocal(l.Index) {
		a.Window = h.SlidingWindow
	}
	att := o.Attention(q, k, v, a)
	x = o.Add(x, o.AddBias(o.Linear(att, l.W("attn_output.weight")), l.W("attn_output.bias")))
	cur = o.RMSNorm(x, l.W("post_attention_norm.weight"), h.NormEps)
	return o.Add(x, o.MoE(cur, MoE{
		Router: l.W("ffn_gate_inp.weight"), RouterBias: l.W("ffn_gate_inp.bias"),
		Gate: l.W("ffn_gate_exps.weight"), Up: l.W("ffn_up_exps.weight"), Down: l.W("ffn_down_exps.weight"),
		GateBias: l.W("ffn_gate_exps.bias"), UpBias: l.W("ffn_up_exps.bias"), DownBias: l.W("ffn_down_exps.bias"),
		TopK: h.ExpertsUsed, WeighChosen: true, OAI: true, OAIAlpha: oaiAlpha, OAILimit: oaiLimit,
	}))
}
