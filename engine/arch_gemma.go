package engine

import (
	"fmt"
	"math"
)

// gemma3 and gemma2, as llama.cpp's graphs (src/models/gemma3.cpp,
// gemma2.cpp): the embedding scaled by √dim; per layer a norm before and
// after attention and before and after the GELU-gated FFN; Q scaled after
// RoPE; local layers that attend over a sliding window; a tied head.
// gemma3 adds per-head Q/K norms and gives its local layers RoPE base
// 10000; gemma2 soft-caps the attention scores and the logits. Norm weights
// are used as the file holds them (llama.cpp's converter adds Gemma's +1).
func init() {
	Register(&Arch{
		Name:    "gemma3",
		Read:    readGemma,
		Tensors: func(h *HParams, _ int) []TensorSpec { return gemmaTensors(h, true) },
		Block:   gemmaBlock,
	})
	Register(&Arch{
		Name:    "gemma2",
		Read:    readGemma,
		Tensors: func(h *HParams, _ int) []TensorSpec { return gemmaTensors(h, false) },
		Block:   gemmaBlock,
	})
}

// gemma3LocalRopeBase is the RoPE base of gemma3's local layers, which
// llama.cpp sets regardless of the file (rope_freq_base_train_swa).
const gemma3LocalRopeBase = 10000

func readGemma(f *File, h *HParams) error {
	h.NeoxRope = true
	var err error
	if h.SlidingWindow, err = uintKey(f, h.Arch+".attention.sliding_window", -1); err != nil {
		return fmt.Errorf("%s: %w", h.Arch, err)
	}
	if h.SlidingWindow <= 0 {
		return fmt.Errorf("%w: %s with attention.sliding_window %d", ErrCorrupt, h.Arch, h.SlidingWindow)
	}
	// The 27B models scale Q by 1/√(dim/heads), the others by 1/√head
	// size; llama.cpp tells them apart by their layer counts.
	big := (h.Arch == "gemma3" && h.Layers == 62) || (h.Arch == "gemma2" && h.Layers == 46)
	if big {
		h.QueryScale = float32(1 / math.Sqrt(float64(h.Dim/h.Heads)))
	} else {
		h.QueryScale = float32(1 / math.Sqrt(float64(h.HeadDim)))
	}
	capKey := func(k string, dst *float32, def float64) error {
		key := h.Arch + "." + k
		v, err := f.Float(key)
		if err != nil {
			if _, present := f.Get(key); present {
				return err
			}
			v = def
		}
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return fmt.Errorf("%w: key %q = %v", ErrCorrupt, key, v)
		}
		*dst = float32(v)
		return nil
	}
	// gemma2's defaults are llama.cpp's (50 and 30); gemma3 has neither
	// unless the file says so.
	attnDef, finalDef := 0.0, 0.0
	if h.Arch == "gemma2" {
		attnDef, finalDef = 50, 30
		if err := capKey("attn_logit_softcapping", &h.AttnSoftCap, attnDef); err != nil {
			return err
		}
	}
	return capKey("final_logit_softcapping", &h.FinalSoftCap, finalDef)
}

func gemmaTensors(h *HParams, qkNorm bool) []TensorSpec {
	d, qd, kv := h.Dim, h.QDim(), h.KVDim()
	ts := []TensorSpec{
		{Name: "attn_norm.weight", Dims: []int{d}},
		{Name: "attn_q.weight", Dims: []int{d, qd}},
		{Name: "attn_k.weight", Dims: []int{d, kv}},
		{Name: "attn_v.weight", Dims: []int{d, kv}},
	}
	if qkNorm {
		ts = append(ts, TensorSpec{Name: "attn_q_norm.weight", Dims: []int{h.HeadDim}},
			TensorSpec{Name: "attn_k_norm.weight", Dims: []int{h.HeadDim}})
	}
	return append(ts,
		TensorSpec{Name: "attn_output.weight", Dims: []int{qd, d}},
		TensorSpec{Name: "post_attention_norm.weight", Dims: []int{d}},
		TensorSpec{Name: "ffn_norm.weight", Dims: []int{d}},
		TensorSpec{Name: "ffn_gate.weight", Dims: []int{d, h.FFN}},
		TensorSpec{Name: "ffn_up.weight", Dims: []int{d, h.FFN}},
		TensorSpec{Name: "ffn_down.weight", Dims: []int{h.FFN, d}},
		TensorSpec{Name: "post_ffw_norm.weight", Dims: []int{d}})
}

// gemmaLocal reports whether layer i attends over the sliding window:
// gemma3's pattern is five local layers, then a global one; gemma2's
// alternates, starting local (llama.cpp's set_swa_pattern(6) and (2)).
func gemmaLocal(h *HParams, i int) bool {
	if h.Arch == "gemma2" {
		return i%2 == 0
	}
	return (i+1)%6 != 0
}

func gemmaBlock(o Ops, l *Layer, x Tensor) Tensor {
	h := l.HP
	if l.Index == 0 {
		// Layer 0 is always the first stage's: the embedding is scaled
		// once, where llama.cpp scales it.
		x = o.Scale(x, float32(math.Sqrt(float64(h.Dim))))
	}
	local := gemmaLocal(h, l.Index)
	rope := standardRope(h)
	a := Attn{Heads: h.Heads, KVHeads: h.KVHeads, HeadDim: h.HeadDim, Scale: 1, SoftCap: h.AttnSoftCap}
	if local {
		a.Window = h.SlidingWindow
		if h.Arch == "gemma3" {
			// llama.cpp's local base, unscaled: only gemma3's global
			// layers scale RoPE.
			rope.Base, rope.FreqScale = gemma3LocalRopeBase, 1
		}
	}
	cur := o.RMSNorm(x, l.W("attn_norm.weight"), h.NormEps)
	qkv := o.Linears(cur, l.W("attn_q.weight"), l.W("attn_k.weight"), l.W("attn_v.weight"))
	q, k, v := qkv[0], qkv[1], qkv[2]
	if n := l.W("attn_q_norm.weight"); n != nil {
		q, k = o.RMSNorm(q, n, h.NormEps), o.RMSNorm(k, l.W("attn_k_norm.weight"), h.NormEps)
	}
	q, k = o.Rope(q, rope), o.Rope(k, rope)
	q = o.Scale(q, h.QueryScale)
	att := o.Linear(o.Attention(q, k, v, a), l.W("attn_output.weight"))
	x = o.Add(x, o.RMSNorm(att, l.W("post_attention_norm.weight"), h.NormEps))
	cur = o.RMSNorm(x, l.W("ffn_norm.weight"), h.NormEps)
	gu := o.Linears(cur, l.W("ffn_gate.weight"), l.W("ffn_up.weight"))
	ffn := o.Linear(o.GELU(gu[0], gu[1]), l.W("ffn_down.weight"))
	return o.Add(x, o.RMSNorm(ffn, l.W("post_ffw_norm.weight"), h.NormEps))
}
