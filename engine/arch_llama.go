package engine

// llama: the pre-norm block that qwen2, qwen3, qwen3moe and phi3 share
// too (they differ in their tensors and RoPE, not in how a layer
// computes). A llama file with experts is Mixtral's layout.
func init() {
	Register(&Arch{
		Name:    "llama",
		Globals: ropeFreqsGlobal,
		Tensors: func(h *HParams, _ int) []TensorSpec { return llamaTensors(h) },
		Block: func(o Ops, l *Layer, x Tensor) Tensor {
			return preNormBlock(o, l, x, standardRope(l.HP))
		},
		Experts: true,
	})
}

// llamaTensors are one llama layer's weights: attention, then a SwiGLU
// FFN or (a file with experts) a mixture of experts.
func llamaTensors(h *HParams) []TensorSpec {
	d, qd, kv := h.Dim, h.QDim(), h.KVDim()
	ts := []TensorSpec{
		{Name: "attn_norm.weight", Dims: []int{d}},
		{Name: "attn_q.weight", Dims: []int{d, qd}},
		{Name: "attn_k.weight", Dims: []int{d, kv}},
		{Name: "attn_v.weight", Dims: []int{d, kv}},
		{Name: "attn_output.weight", Dims: []int{qd, d}},
		{Name: "ffn_norm.weight", Dims: []int{d}},
	}
	if h.MoE() {
		return append(ts, moeTensors(h)...)
	}
	return append(ts,
		TensorSpec{Name: "ffn_gate.weight", Dims: []int{d, h.FFN}},
		TensorSpec{Name: "ffn_up.weight", Dims: []int{d, h.FFN}},
		TensorSpec{Name: "ffn_down.weight", Dims: []int{h.FFN, d}})
}

// ropeFreqsGlobal is rope_freqs.weight, which Llama 3.1 and later files
// hold (ReadHParams sets RopeFactors where the file has it).
func ropeFreqsGlobal(h *HParams) []TensorSpec {
	if !h.RopeFactors {
		return nil
	}
	return []TensorSpec{{Name: "rope_freqs.weight", Dims: []int{h.HeadDim / 2}}}
}

// standardRope is RoPE over whole heads at the file's base, divided by
// rope_freqs.weight where the file has it, with the file's linear or YaRN
// scaling (rope.scaling.*).
func standardRope(h *HParams) Rope {
	ctx, fs, ext, attn, fast, slow := h.RopeExt()
	r := Rope{Dims: h.HeadDim, Neox: h.NeoxRope, Base: h.RopeBase, AttnFactor: attn,
		OrigContext: ctx, FreqScale: fs, ExtFactor: ext, BetaFast: fast, BetaSlow: slow}
	if h.RopeFactors {
		r.Factors = "rope_freqs.weight"
	}
	return r
}

// preNormBlock is x + attention(norm(x)), then x + FFN(norm(x)), with
// Q/K/V biases (qwen2) and per-head Q/K norms (qwen3) where the layer has
// them; the FFN is SwiGLU, or a mixture of SwiGLU experts where the layer
// has a router.
func preNormBlock(o Ops, l *Layer, x Tensor, rope Rope) Tensor {
	h := l.HP
	cur := o.RMSNorm(x, l.W("attn_norm.weight"), h.NormEps)
	qkv := o.Linears(cur, l.W("attn_q.weight"), l.W("attn_k.weight"), l.W("attn_v.weight"))
	q, k, v := qkv[0], qkv[1], qkv[2]
	if b := l.W("attn_q.bias"); b != nil {
		q, k, v = o.AddBias(q, b), o.AddBias(k, l.W("attn_k.bias")), o.AddBias(v, l.W("attn_v.bias"))
	}
	if n := l.W("attn_q_norm.weight"); n != nil {
		q, k = o.RMSNorm(q, n, h.NormEps), o.RMSNorm(k, l.W("attn_k_norm.weight"), h.NormEps)
	}
	q, k = o.Rope(q, rope), o.Rope(k, rope)
	att := o.Attention(q, k, v, Attn{Heads: h.Heads, KVHeads: h.KVHeads, HeadDim: h.HeadDim})
	x = o.Add(x, o.Linear(att, l.W("attn_output.weight")))
	cur = o.RMSNorm(x, l.W("ffn_norm.weight"), h.NormEps)
	if r := l.W("ffn_gate_inp.weight"); r != nil {
		return o.Add(x, o.MoE(cur, MoE{Router: r, Gate: l.W("ffn_gate_exps.weight"), Up: l.W("ffn_up_exps.weight"),
			Down: l.W("ffn_down_exps.weight"), TopK: h.ExpertsUsed, NormTopK: true}))
	}
	gu := o.Linears(cur, l.W("ffn_gate.weight"), l.W("ffn_up.weight"))
	return o.Add(x, o.Linear(o.SwiGLU(gu[0], gu[1]), l.W("ffn_down.weight")))
}
