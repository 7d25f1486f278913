package engine

import (
	"fmt"
	"math"
)

// deepseek2 (DeepSeek-V2/V3, Kimi-K2: llama.cpp's deepseek2 graph): a
// pre-norm block whose attention is multi-head latent attention and whose
// FFN, after the leading dense layers, is a mixture of experts plus shared
// experts.
//
// MLA: Q comes through a low-rank projection (attn_q_a, an RMSNorm,
// attn_q_b; a plain attn_q in the 26- and 27-layer "lite" models, as
// llama.cpp decides by layer count); each head's Q is NopeDims values
// without RoPE, then RopeDims with. attn_kv_a_mqa makes, per token, a
// latent of KVLoraRank values (RMSNorm'd by attn_kv_a_norm) and one
// RopeDims-wide K part shared by all heads. Where the file holds attn_k_b
// and attn_v_b (MLA, what llama.cpp's converter writes now), the engines
// run it absorbed, as llama.cpp does: Q's non-RoPE part goes through k_b
// into latent space, attention is one KV head of [k_pe | latent] with V
// the latent itself, and v_b takes each head's output back out of it; the
// cache holds KVLoraRank+RopeDims values per token and layer. Where it
// holds attn_kv_b, K and V are decompressed per token and cached per
// head, as llama.cpp's non-MLA path.
//
// Routing (llama.cpp's build_moe_ffn): sigmoid (or softmax) probabilities;
// exp_probs_b, where present, is added for choosing only; with expert
// groups, the groups whose two best experts sum highest are kept; the
// chosen experts' unbiased probabilities are renormalised
// (expert_weights_norm) and scaled (expert_weights_scale).
func init() {
	Register(&Arch{
		Name:        "deepseek2",
		Read:        readDeepSeek2,
		Tensors:     deepseek2Tensors,
		Block:       deepseek2Block,
		Experts:     true,
		DeepSeekMoE: true,
		OwnHeads:    true,
	})
}

// deepseek2Lite is llama.cpp's test for a model without a Q LoRA.
func deepseek2Lite(h *HParams) bool { return h.Layers == 26 || h.Layers == 27 }

func readDeepSeek2(f *File, h *HParams) error {
	a := h.Arch
	bad := func(key string, v any) error { return fmt.Errorf("%w: key %q = %v", ErrCorrupt, a+"."+key, v) }
	geti := func(key string, dst *int, def int) error {
		n, err := uintKey(f, a+"."+key, def)
		if err == nil {
			*dst = n
		}
		return err
	}
	if !deepseek2Lite(h) {
		if err := geti("attention.q_lora_rank", &h.QLoraRank, -1); err != nil {
			return err
		}
		if h.QLoraRank <= 0 || h.QLoraRank > 1<<16 {
			return bad("attention.q_lora_rank", h.QLoraRank)
		}
	}
	if err := geti("attention.kv_lora_rank", &h.KVLoraRank, -1); err != nil {
		return err
	}
	if h.KVLoraRank <= 0 || h.KVLoraRank > 1<<16 {
		return bad("attention.kv_lora_rank", h.KVLoraRank)
	}
	var kMLA, vMLA int
	if err := geti("attention.key_length_mla", &kMLA, 0); err != nil {
		return err
	}
	if err := geti("attention.value_length_mla", &vMLA, 0); err != nil {
		return err
	}
	if _, ok := f.Get(a + ".attention.temperature_scale"); ok {
		return fmt.Errorf("%w: %s with attention temperature scaling (mistral-large's) is not supported", ErrUnsupportedArch, a)
	}
	// As llama.cpp: with both MLA lengths, the head sizes are theirs and
	// key_length/value_length are the absorbed attention's.
	h.MLA = kMLA != 0 && vMLA != 0
	headK := h.HeadDim
	if h.MLA {
		headK, h.VHeadDim = kMLA, vMLA
	}
	h.NopeDims = headK - h.RopeDims
	switch {
	case h.RopeDims <= 0 || h.RopeDims%2 != 0:
		return bad("rope.dimension_count", h.RopeDims)
	case h.NopeDims <= 0:
		return fmt.Errorf("%w: %s head of %d with %d RoPE dimensions leaves no non-RoPE part", ErrShape, a, headK, h.RopeDims)
	case h.VHeadDim <= 0 || h.VHeadDim > 1<<14:
		return bad("attention.value_length", h.VHeadDim)
	case h.MLA && h.KVHeads != 1:
		return fmt.Errorf("%w: %s with MLA tensors and %d KV heads (the absorbed attention has 1)", ErrShape, a, h.KVHeads)
	case h.MLA && h.HeadDim != h.KVLoraRank+h.RopeDims:
		return fmt.Errorf("%w: %s key_length %d, want kv_lora_rank + RoPE dims %d", ErrShape, a, h.HeadDim, h.KVLoraRank+h.RopeDims)
	case !h.MLA && h.KVHeads != h.Heads:
		return fmt.Errorf("%w: %s with attn_kv_b and %d KV heads of %d heads", ErrShape, a, h.KVHeads, h.Heads)
	case h.LeadingDense > h.Layers:
		return bad("leading_dense_block_count", h.LeadingDense)
	case !h.MoE() && h.LeadingDense < h.Layers:
		// llama.cpp throws "n_expert must be > 0" for the layers after.
		return fmt.Errorf("%w: %s without experts and %d of %d layers dense (leading_dense_block_count must then be block_count)", ErrCorrupt, a, h.LeadingDense, h.Layers)
	}
	return nil
}

// readDeepSeekExperts reads and checks deepseek2's expert keys (h.Experts
// > 0), as llama.cpp's load_hparams and its asserts.
func readDeepSeekExperts(f *File, h *HParams, geti func(key string, dst *int, def int) error) error {
	a := h.Arch
	bad := func(key string, v any) error { return fmt.Errorf("%w: key %q = %v", ErrCorrupt, a+"."+key, v) }
	for _, e := range []error{
		geti("expert_used_count", &h.ExpertsUsed, -1),
		geti("expert_feed_forward_length", &h.ExpertFFN, -1),
		geti("expert_shared_count", &h.SharedExperts, -1),
		geti("expert_gating_func", &h.ExpertGating, 0),
		geti("expert_group_count", &h.ExpertGroups, 0),
		geti("expert_group_used_count", &h.GroupsUsed, 0),
	} {
		if e != nil {
			return e
		}
	}
	key := a + ".expert_weights_scale"
	v, err := f.Float(key)
	if err != nil {
		return err
	}
	if !(v > 0) || math.IsInf(v, 0) {
		return bad("expert_weights_scale", v)
	}
	h.ExpertWeightsScale = float32(v)
	if nv, ok := f.Get(a + ".expert_weights_norm"); ok {
		b, isBool := nv.(bool)
		if !isBool {
			return fmt.Errorf("%w: key %q is %T, want bool", ErrCorrupt, a+".expert_weights_norm", nv)
		}
		h.ExpertWeightsNorm = b
	}
	if h.ExpertGating == 0 {
		h.ExpertGating = gatingSoftmax // as llama.cpp, for DeepSeek-V2 files without the key
	}
	switch {
	case h.ExpertsUsed <= 0 || h.ExpertsUsed > h.Experts:
		return bad("expert_used_count", h.ExpertsUsed)
	case h.ExpertFFN <= 0:
		return bad("expert_feed_forward_length", h.ExpertFFN)
	case h.SharedExperts <= 0:
		return bad("expert_shared_count", h.SharedExperts)
	case h.ExpertGating != gatingSoftmax && h.ExpertGating != gatingSigmoid:
		return fmt.Errorf("%w: %s with expert gating function %d (supported: softmax 1, sigmoid 2)", ErrUnsupportedArch, a, h.ExpertGating)
	case h.ExpertGroups >= h.Experts:
		return bad("expert_group_count", h.ExpertGroups)
	case h.ExpertGroups > 1 && (h.Experts%h.ExpertGroups != 0 || h.Experts/h.ExpertGroups < 2):
		return fmt.Errorf("%w: %d experts in %d groups (want groups of at least 2, all alike)", ErrCorrupt, h.Experts, h.ExpertGroups)
	case h.ExpertGroups > 1 && (h.GroupsUsed <= 0 || h.GroupsUsed >= h.ExpertGroups):
		return bad("expert_group_used_count", h.GroupsUsed)
	case h.LeadingDense > h.Layers:
		return bad("leading_dense_block_count", h.LeadingDense)
	}
	if h.ExpertGroups <= 1 {
		h.ExpertGroups, h.GroupsUsed = 0, 0
	}
	h.SharedFFN = h.ExpertFFN * h.SharedExperts
	if t := legacyExpertTensor(f); t != "" {
		return fmt.Errorf("%w: %s holds one tensor per expert (%s): only merged _exps tensors are supported", ErrUnsupportedArch, a, t)
	}
	return nil
}

// deepseek2Dense reports whether layer li has a dense FFN.
func deepseek2Dense(h *HParams, li int) bool { return !h.MoE() || li < h.LeadingDense }

func deepseek2Tensors(h *HParams, li int) []TensorSpec {
	d, nh, r, kvl := h.Dim, h.Heads, h.RopeDims, h.KVLoraRank
	headK := h.NopeDims + r
	ts := []TensorSpec{{Name: "attn_norm.weight", Dims: []int{d}}}
	if deepseek2Lite(h) {
		ts = append(ts, TensorSpec{Name: "attn_q.weight", Dims: []int{d, nh * headK}})
	} else {
		ts = append(ts,
			TensorSpec{Name: "attn_q_a.weight", Dims: []int{d, h.QLoraRank}},
			TensorSpec{Name: "attn_q_a_norm.weight", Dims: []int{h.QLoraRank}},
			TensorSpec{Name: "attn_q_b.weight", Dims: []int{h.QLoraRank, nh * headK}})
	}
	ts = append(ts,
		TensorSpec{Name: "attn_kv_a_mqa.weight", Dims: []int{d, kvl + r}},
		TensorSpec{Name: "attn_kv_a_norm.weight", Dims: []int{kvl}})
	if h.MLA {
		ts = append(ts,
			TensorSpec{Name: "attn_k_b.weight", Dims: []int{h.NopeDims, kvl, nh}},
			TensorSpec{Name: "attn_v_b.weight", Dims: []int{kvl, h.VHeadDim, nh}})
	} else {
		ts = append(ts, TensorSpec{Name: "attn_kv_b.weight", Dims: []int{kvl, nh * (h.NopeDims + h.VHeadDim)}})
	}
	ts = append(ts,
		TensorSpec{Name: "attn_output.weight", Dims: []int{nh * h.VHeadDim, d}},
		TensorSpec{Name: "ffn_norm.weight", Dims: []int{d}})
	if deepseek2Dense(h, li) {
		return append(ts,
			TensorSpec{Name: "ffn_gate.weight", Dims: []int{d, h.FFN}},
			TensorSpec{Name: "ffn_up.weight", Dims: []int{d, h.FFN}},
			TensorSpec{Name: "ffn_down.weight", Dims: []int{h.FFN, d}})
	}
	e, ff, sh := h.Experts, h.ExpertFFN, h.SharedFFN
	return append(ts,
		TensorSpec{Name: "ffn_gate_inp.weight", Dims: []int{d, e}},
		TensorSpec{Name: "exp_probs_b.bias", Dims: []int{e}, Optional: true},
		TensorSpec{Name: "ffn_gate_exps.weight", Dims: []int{d, ff, e}},
		TensorSpec{Name: "ffn_up_exps.weight", Dims: []int{d, ff, e}},
		TensorSpec{Name: "ffn_down_exps.weight", Dims: []int{ff, d, e}},
		TensorSpec{Name: "ffn_gate_shexp.weight", Dims: []int{d, sh}},
		TensorSpec{Name: "ffn_up_shexp.weight", Dims: []int{d, sh}},
		TensorSpec{Name: "ffn_down_shexp.weight", Dims: []int{sh, d}})
}

// deepseek2Rope is the RoPE of a head's RopeDims part: llama.cpp's normal
// (consecutive pairs) RoPE with the model's scaling.
func deepseek2Rope(h *HParams) Rope {
	r := standardRope(h)
	r.Dims, r.Neox, r.Factors = h.RopeDims, false, ""
	return r
}

// deepseek2KQScale is llama.cpp's kq_scale for deepseek2: YaRN's
// magnitude correction, undone from the attention factor and redone with
// the file's log multiplier, squared, over √(head size of Q·K); each
// float32 step as there.
func deepseek2KQScale(h *HParams) float32 {
	_, fs, _, attn, _, _ := h.RopeExt()
	l := logf(1 / fs)
	org := float32(attn * float32(1+float32(0.1*l)))
	m := float32(org * float32(1+float32(float32(0.1*h.YarnLogMul)*l)))
	return float32(float32(1*m)*m) / float32(math.Sqrt(float64(float32(h.NopeDims+h.RopeDims))))
}

func deepseek2Block(o Ops, l *Layer, x Tensor) Tensor {
	h := l.HP
	nope, r, kvl := h.NopeDims, h.RopeDims, h.KVLoraRank
	headK := nope + r
	rope := deepseek2Rope(h)
	cur := o.RMSNorm(x, l.W("attn_norm.weight"), h.NormEps)
	var q, kvpe Tensor
	if w := l.W("attn_q.weight"); w != nil {
		qk := o.Linears(cur, w, l.W("attn_kv_a_mqa.weight"))
		q, kvpe = qk[0], qk[1]
	} else {
		qk := o.Linears(cur, l.W("attn_q_a.weight"), l.W("attn_kv_a_mqa.weight"))
		q, kvpe = o.RMSNorm(qk[0], l.W("attn_q_a_norm.weight"), h.NormEps), qk[1]
		q = o.Linear(q, l.W("attn_q_b.weight"))
	}
	qNope, qPe := o.Slice(q, headK, 0, nope), o.Slice(q, headK, nope, headK)
	latent, kPe := o.Slice(kvpe, kvl+r, 0, kvl), o.Slice(kvpe, kvl+r, kvl, kvl+r)
	qPe, kPe = o.Rope(qPe, rope), o.Rope(kPe, rope)
	latent = o.RMSNorm(latent, l.W("attn_kv_a_norm.weight"), h.NormEps)
	a := Attn{Heads: h.Heads, Scale: deepseek2KQScale(h)}
	var att Tensor
	if h.MLA {
		// Absorbed: one KV head of [k_pe | latent]; V is the latent, the
		// last kvl values of each cached K row.
		qAbs := o.HeadLinear(qNope, l.W("attn_k_b.weight"))
		a.KVHeads, a.HeadDim, a.VDim = 1, r+kvl, kvl
		att = o.Attention(o.Concat(qPe, qAbs, r, kvl), o.Concat(kPe, latent, r, kvl), nil, a)
		att = o.HeadLinear(att, l.W("attn_v_b.weight"))
	} else {
		vd := h.VHeadDim
		kv := o.Linear(latent, l.W("attn_kv_b.weight"))
		kNope, v := o.Slice(kv, nope+vd, 0, nope), o.Slice(kv, nope+vd, nope, nope+vd)
		a.KVHeads, a.HeadDim, a.VDim = h.Heads, headK, vd
		att = o.Attention(o.Concat(qPe, qNope, r, nope), o.Concat(kPe, kNope, r, nope), v, a)
	}
	x = o.Add(x, o.Linear(att, l.W("attn_output.weight")))
	cur = o.RMSNorm(x, l.W("ffn_norm.weight"), h.NormEps)
	if deepseek2Dense(h, l.Index) {
		gu := o.Linears(cur, l.W("ffn_gate.weight"), l.W("ffn_up.weight"))
		return o.Add(x, o.Linear(o.SwiGLU(gu[0], gu[1]), l.W("ffn_down.weight")))
	}
	moe := o.MoE(cur, MoE{
		Router: l.W("ffn_gate_inp.weight"), SelectBias: l.W("exp_probs_b.bias"),
		Gate: l.W("ffn_gate_exps.weight"), Up: l.W("ffn_up_exps.weight"), Down: l.W("ffn_down_exps.weight"),
		TopK: h.ExpertsUsed, NormTopK: h.ExpertWeightsNorm, Sigmoid: h.ExpertGating == gatingSigmoid,
		Groups: h.ExpertGroups, GroupsUsed: h.GroupsUsed, WeightScale: h.ExpertWeightsScale, DeepSeek: true,
	})
	gu := o.Linears(cur, l.W("ffn_gate_shexp.weight"), l.W("ffn_up_shexp.weight"))
	shared := o.Linear(o.SwiGLU(gu[0], gu[1]), l.W("ffn_down_shexp.weight"))
	return o.Add(x, o.Add(moe, shared))
}
