package engine

import (
	"fmt"
	"math"
)

// DeepSeek2Gen is the part of GenConfig that shapes a deepseek2 model
// (DeepSeek-V3/Kimi-K2's layout, small): multi-head latent attention,
// leading dense layers, then experts with shared experts and sigmoid,
// group-limited routing. Zero fields take the defaults in brackets.
type DeepSeek2Gen struct {
	// QLoraRank is attention.q_lora_rank [Dim/2]; with 26 or 27 layers,
	// which llama.cpp reads as DeepSeek-V2-Lite's shape, Q is one plain
	// attn_q and the key is not written.
	QLoraRank  int
	KVLoraRank int // attention.kv_lora_rank [64]
	RopeDims   int // a head's RoPE part, rope.dimension_count [16]
	// A head's Q·K size is GenConfig.HeadDim [32 + RopeDims]; NopeDims is
	// HeadDim − RopeDims.
	VHeadDim      int // a head's V size [32]
	LeadingDense  int // leading_dense_block_count [1; every layer without experts]
	SharedExperts int // expert_shared_count [1]
	// ExpertGroups and GroupsUsed: group-limited routing [0: none].
	ExpertGroups, GroupsUsed int
	WeightsScale             float32 // expert_weights_scale [2.5, DeepSeek-V3's]
	// Softmax: softmax gating without renormalised weights, as
	// DeepSeek-V2 (default: V3's sigmoid, renormalised, with exp_probs_b).
	Softmax bool
	// KVB writes the older layout, attn_kv_b with per-head key and value
	// lengths, instead of attn_k_b and attn_v_b with the _mla lengths.
	KVB bool
}

func (c GenConfig) deepseek2Defaults() GenConfig {
	g := &c.DeepSeek2
	if g.QLoraRank == 0 {
		g.QLoraRank = max(32, c.Dim/2)
	}
	if g.KVLoraRank == 0 {
		g.KVLoraRank = 64
	}
	if g.RopeDims == 0 {
		g.RopeDims = 16
	}
	if c.HeadDim == 0 {
		c.HeadDim = 32 + g.RopeDims
	}
	if g.VHeadDim == 0 {
		g.VHeadDim = 32
	}
	switch {
	case c.Experts == 0:
		g.LeadingDense = c.Layers // llama.cpp's deepseek2 needs experts after the dense layers
	case g.LeadingDense == 0:
		g.LeadingDense = 1
	}
	if g.SharedExperts == 0 && c.Experts > 0 {
		g.SharedExperts = 1
	}
	if g.WeightsScale == 0 {
		g.WeightsScale = 2.5
	}
	if c.ExpertFFN == 0 {
		c.ExpertFFN = c.FFN
	}
	return c
}

// validateDeepSeek2 checks a deepseek2 shape: what llama.cpp asserts, and
// widths the file's types can hold.
func (c GenConfig) validateDeepSeek2() error {
	g := c.DeepSeek2
	bad := func(f string, v any) error { return fmt.Errorf("%w: generate deepseek2: %s = %v", ErrShape, f, v) }
	nope := c.HeadDim - g.RopeDims
	block := 32
	if c.Mix == "" {
		block = dtypes[c.DType].block
	}
	switch {
	case c.Layers <= 0:
		return bad("layers", c.Layers)
	case c.Heads <= 0 || c.Dim <= 0 || c.FFN <= 0 || c.Vocab < minVocab:
		return bad("dim/heads/ffn/vocab", fmt.Sprintf("%d/%d/%d/%d", c.Dim, c.Heads, c.FFN, c.Vocab))
	case g.RopeDims <= 0 || g.RopeDims%2 != 0 || nope <= 0:
		return bad("rope dims/head-dim", fmt.Sprintf("%d/%d", g.RopeDims, c.HeadDim))
	case g.QLoraRank <= 0 || g.KVLoraRank <= 0 || g.VHeadDim <= 0:
		return bad("q/kv lora rank, v head", fmt.Sprintf("%d/%d/%d", g.QLoraRank, g.KVLoraRank, g.VHeadDim))
	case c.Mix != "" && c.Mix != "q4_k_m" && c.Mix != "q5_k_m":
		return fmt.Errorf("%w: generate deepseek2 mix %q (want q4_k_m or q5_k_m)", ErrUnsupportedType, c.Mix)
	case c.Mix == "" && !c.DType.Supported():
		return fmt.Errorf("%w: generate %s", ErrUnsupportedType, c.DType)
	case c.RopeScaling != "" && c.RopeScaling != "yarn":
		return bad("rope-scaling (deepseek2: yarn)", c.RopeScaling)
	case c.RopeScaling != "" && !(c.RopeScalingFactor > 1):
		return bad("rope-scaling-factor", c.RopeScalingFactor)
	case c.Tied || c.RopeFreqs || c.LongRoPE || c.SlidingWindow != 0:
		return bad("tied/rope-freqs/long-rope/sliding-window", "not for deepseek2")
	}
	for _, w := range []struct {
		name string
		n    int
	}{{"dim", c.Dim}, {"ffn", c.FFN}, {"q lora rank", g.QLoraRank}, {"kv lora rank", g.KVLoraRank},
		{"head-dim − rope dims", nope}, {"heads × v head", c.Heads * g.VHeadDim}} {
		if w.n%block != 0 {
			return bad(fmt.Sprintf("%s (needs a multiple of %d)", w.name, block), w.n)
		}
	}
	if c.Experts == 0 {
		if c.ExpertsUsed != 0 || g.ExpertGroups != 0 {
			return bad("experts (needed by experts-used and expert groups)", c.Experts)
		}
		return nil
	}
	switch {
	case c.Experts < 2 || c.Experts > maxExperts:
		return bad("experts", c.Experts)
	case c.ExpertsUsed <= 0 || c.ExpertsUsed > c.Experts:
		return bad("experts-used", c.ExpertsUsed)
	case c.ExpertFFN%block != 0:
		return bad(fmt.Sprintf("expert-ffn (needs a multiple of %d)", block), c.ExpertFFN)
	case g.LeadingDense < 0 || g.LeadingDense >= c.Layers:
		return bad("leading dense layers (fewer than the layers)", g.LeadingDense)
	case g.SharedExperts <= 0:
		return bad("shared experts", g.SharedExperts)
	case g.ExpertGroups == 1 || g.ExpertGroups < 0 || g.ExpertGroups > 1 && (c.Experts%g.ExpertGroups != 0 || c.Experts/g.ExpertGroups < 2):
		return bad("expert groups (dividing the experts in groups of 2 or more)", g.ExpertGroups)
	case g.ExpertGroups > 1 && (g.GroupsUsed <= 0 || g.GroupsUsed >= g.ExpertGroups):
		return bad("expert groups used", g.GroupsUsed)
	case g.ExpertGroups == 0 && g.GroupsUsed != 0:
		return bad("expert groups used (without groups)", g.GroupsUsed)
	case !(g.WeightsScale > 0):
		return bad("expert weights scale", g.WeightsScale)
	}
	return nil
}

// deepseek2Parts is a generated deepseek2 model (KVHeads is not used: the
// layout sets head_count_kv), with the keys and tensor
// names llama.cpp's converter writes (DeepseekV2Model; MLA: attn_k_b and
// attn_v_b, key_length = kv_lora_rank + RoPE dims over one KV head).
func deepseek2Parts(c GenConfig) ([]KV, []WriteTensor, error) {
	hd := c.HeadDim
	c = c.withDefaults()
	c.HeadDim = hd // withDefaults' Dim/Heads is not deepseek2's default
	c = c.deepseek2Defaults()
	if err := c.validateDeepSeek2(); err != nil {
		return nil, nil, err
	}
	g, a := c.DeepSeek2, "deepseek2"
	nope, r, kvl, nh := c.HeadDim-g.RopeDims, g.RopeDims, g.KVLoraRank, c.Heads
	fileType := fileTypes[c.DType]
	if c.Mix != "" {
		fileType = map[string]uint32{"q4_k_m": 15, "q5_k_m": 17}[c.Mix]
	}
	u := func(n int) uint32 { return uint32(n) }
	kvs := []KV{
		{"general.architecture", a},
		{"general.name", c.Name},
		{"general.file_type", fileType},
		{"general.quantization_version", uint32(2)},
		{"general.alignment", uint32(ggufDefaultAlign)},
		{a + ".context_length", u(c.Context)},
		{a + ".embedding_length", u(c.Dim)},
		{a + ".block_count", u(c.Layers)},
		{a + ".feed_forward_length", u(c.FFN)},
		{a + ".attention.head_count", u(nh)},
		{a + ".rope.freq_base", c.RopeBase},
		{a + ".rope.dimension_count", u(r)},
		{a + ".attention.layer_norm_rms_epsilon", c.NormEps},
		{a + ".attention.kv_lora_rank", u(kvl)},
		{a + ".leading_dense_block_count", u(g.LeadingDense)},
		{a + ".vocab_size", u(c.Vocab)},
		{"strata.generator.seed", c.Seed},
	}
	lite := c.Layers == 26 || c.Layers == 27
	if !lite {
		kvs = append(kvs, KV{a + ".attention.q_lora_rank", u(g.QLoraRank)})
	}
	if g.KVB {
		kvs = append(kvs, KV{a + ".attention.head_count_kv", u(nh)},
			KV{a + ".attention.key_length", u(c.HeadDim)}, KV{a + ".attention.value_length", u(g.VHeadDim)})
	} else {
		kvs = append(kvs, KV{a + ".attention.head_count_kv", u(1)},
			KV{a + ".attention.key_length", u(kvl + r)}, KV{a + ".attention.value_length", u(kvl)},
			KV{a + ".attention.key_length_mla", u(c.HeadDim)}, KV{a + ".attention.value_length_mla", u(g.VHeadDim)})
	}
	// llama.cpp reads these whether or not a layer has experts.
	gating := gatingSigmoid
	if g.Softmax {
		gating = gatingSoftmax
	}
	kvs = append(kvs, KV{a + ".expert_count", u(c.Experts)}, KV{a + ".expert_used_count", u(c.ExpertsUsed)},
		KV{a + ".expert_feed_forward_length", u(c.ExpertFFN)}, KV{a + ".expert_shared_count", u(max(1, g.SharedExperts))},
		KV{a + ".expert_weights_scale", g.WeightsScale}, KV{a + ".expert_weights_norm", !g.Softmax},
		KV{a + ".expert_gating_func", u(gating)})
	if g.ExpertGroups > 1 {
		kvs = append(kvs, KV{a + ".expert_group_count", u(g.ExpertGroups)}, KV{a + ".expert_group_used_count", u(g.GroupsUsed)})
	}
	if c.RopeScaling == "yarn" {
		orig := c.RopeOrigContext
		if orig == 0 {
			orig = max(1, int(float32(c.Context)/c.RopeScalingFactor))
		}
		// As the converter writes DeepSeek-V3's (mscale_all_dims 1).
		kvs = append(kvs, KV{a + ".rope.scaling.type", "yarn"}, KV{a + ".rope.scaling.factor", c.RopeScalingFactor},
			KV{a + ".rope.scaling.original_context_length", u(orig)}, KV{a + ".rope.scaling.yarn_log_multiplier", float32(0.1)})
	}
	if c.Tokenizer != nil {
		kvs = append(kvs, c.Tokenizer...)
	} else {
		v, err := buildVocab(a, c.Vocab)
		if err != nil {
			return nil, nil, err
		}
		for _, kv := range vocabKVs(v, chatTemplates["gpt2"]) {
			if kv.Key == "tokenizer.ggml.pre" {
				kv.Value = "deepseek-v3"
			}
			kvs = append(kvs, kv)
		}
	}
	var ts []WriteTensor
	typ := func(name string, cols uint64) DType {
		if c.Mix != "" {
			return mixType(c.Mix, name, c.Layers, int(cols), c.Experts)
		}
		return c.DType
	}
	mat := func(name string, scale float32, dims ...uint64) {
		ts = append(ts, randTensor(name, dims, typ(name, dims[0]), c.Seed, scale, 0))
	}
	f32 := func(name string, scale, bias float32, dims ...uint64) {
		ts = append(ts, randTensor(name, dims, F32, c.Seed, scale, bias))
	}
	is := func(n int) float32 { return 1 / float32(math.Sqrt(float64(n))) }
	d, U := uint64(c.Dim), func(n int) uint64 { return uint64(n) }
	mat("token_embd.weight", 1, d, U(c.Vocab))
	for l := range c.Layers {
		p := fmt.Sprintf("blk.%d.", l)
		f32(p+"attn_norm.weight", 0.2, 1, d)
		if lite {
			mat(p+"attn_q.weight", is(c.Dim), d, U(nh*c.HeadDim))
		} else {
			mat(p+"attn_q_a.weight", is(c.Dim), d, U(g.QLoraRank))
			f32(p+"attn_q_a_norm.weight", 0.2, 1, U(g.QLoraRank))
			mat(p+"attn_q_b.weight", is(g.QLoraRank), U(g.QLoraRank), U(nh*c.HeadDim))
		}
		mat(p+"attn_kv_a_mqa.weight", is(c.Dim), d, U(kvl+r))
		f32(p+"attn_kv_a_norm.weight", 0.2, 1, U(kvl))
		if g.KVB {
			mat(p+"attn_kv_b.weight", is(kvl), U(kvl), U(nh*(nope+g.VHeadDim)))
		} else {
			mat(p+"attn_k_b.weight", is(kvl), U(nope), U(kvl), U(nh))
			mat(p+"attn_v_b.weight", is(kvl), U(kvl), U(g.VHeadDim), U(nh))
		}
		mat(p+"attn_output.weight", is(nh*g.VHeadDim), U(nh*g.VHeadDim), d)
		f32(p+"ffn_norm.weight", 0.2, 1, d)
		if c.Experts == 0 || l < g.LeadingDense {
			mat(p+"ffn_gate.weight", is(c.Dim), d, U(c.FFN))
			mat(p+"ffn_up.weight", is(c.Dim), d, U(c.FFN))
			mat(p+"ffn_down.weight", is(c.FFN), U(c.FFN), d)
			continue
		}
		ne, ef, sh := U(c.Experts), U(c.ExpertFFN), U(c.ExpertFFN*g.SharedExperts)
		// The router and the selection bias stay F32, as the converter
		// writes them and llama-quantize leaves them.
		f32(p+"ffn_gate_inp.weight", is(c.Dim), 0, d, ne)
		if !g.Softmax {
			f32(p+"exp_probs_b.bias", 0.05, 0, ne)
		}
		mat(p+"ffn_gate_exps.weight", is(c.Dim), d, ef, ne)
		mat(p+"ffn_up_exps.weight", is(c.Dim), d, ef, ne)
		mat(p+"ffn_down_exps.weight", is(c.ExpertFFN), ef, d, ne)
		mat(p+"ffn_gate_shexp.weight", is(c.Dim), d, sh)
		mat(p+"ffn_up_shexp.weight", is(c.Dim), d, sh)
		mat(p+"ffn_down_shexp.weight", is(int(sh)), sh, d)
	}
	f32("output_norm.weight", 0.2, 1, d)
	mat("output.weight", 2*is(c.Dim), d, U(c.Vocab))
	return kvs, ts, nil
}
