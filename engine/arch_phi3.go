package engine

import "fmt"

// phi3: llama's block on fused tensors (attn_qkv holds Q, K and V;
// ffn_up holds gate then up, llama.cpp's LLM_FFN_SWIGLU on one tensor),
// NEOX RoPE, and LongRoPE in the 128k models and Phi-3.5 mini.
func init() {
	Register(&Arch{
		Name: "phi3",
		Read: readPhi3,
		Globals: func(h *HParams) []TensorSpec {
			g := ropeFreqsGlobal(h)
			if h.LongRoPE {
				// The long factors are read only to check the file: sessions
				// stay within the original context (see Local.NewSession).
				g = append(g, TensorSpec{Name: "rope_factors_short.weight", Dims: []int{h.HeadDim / 2}},
					TensorSpec{Name: "rope_factors_long.weight", Dims: []int{h.HeadDim / 2}})
			}
			return g
		},
		Tensors: func(h *HParams, _ int) []TensorSpec {
			d, qd, kv := h.Dim, h.QDim(), h.KVDim()
			return []TensorSpec{
				{Name: "attn_norm.weight", Dims: []int{d}},
				// llama.cpp accepts separate attn_q/k/v too.
				{Name: "attn_q.weight", Dims: []int{d, qd}, Fused: "attn_qkv.weight"},
				{Name: "attn_k.weight", Dims: []int{d, kv}, Fused: "attn_qkv.weight"},
				{Name: "attn_v.weight", Dims: []int{d, kv}, Fused: "attn_qkv.weight"},
				{Name: "attn_output.weight", Dims: []int{qd, d}},
				{Name: "ffn_norm.weight", Dims: []int{d}},
				{Name: "ffn_gate.weight", Dims: []int{d, h.FFN}, Fused: "ffn_up.weight"},
				{Name: "ffn_up.weight", Dims: []int{d, h.FFN}, Fused: "ffn_up.weight"},
				{Name: "ffn_down.weight", Dims: []int{h.FFN, d}},
			}
		},
		Block: func(o Ops, l *Layer, x Tensor) Tensor {
			r := standardRope(l.HP)
			if l.HP.LongRoPE {
				// The short factors, as llama.cpp uses within the original
				// context.
				r.Factors = "rope_factors_short.weight"
			}
			return preNormBlock(o, l, x, r)
		},
	})
}

func readPhi3(f *File, h *HParams) error {
	h.NeoxRope = true
	// phi3's graph sizes Q and the attention output by the embedding.
	if h.QDim() != h.Dim {
		return fmt.Errorf("%w: phi3 with head size %d × %d heads ≠ embedding %d", ErrUnsupportedArch, h.HeadDim, h.Heads, h.Dim)
	}
	_, short := f.Tensor("rope_factors_short.weight")
	_, long := f.Tensor("rope_factors_long.weight")
	if short != long {
		return fmt.Errorf("%w: phi3 with only one of rope_factors_short.weight and rope_factors_long.weight", ErrCorrupt)
	}
	h.LongRoPE = short
	var err error
	if h.SlidingWindow, err = uintKey(f, h.Arch+".attention.sliding_window", 0); err != nil {
		return err
	}
	if h.LongRoPE {
		// The engine serves the original context (see HParams.LongRoPE).
		key := h.Arch + ".rope.scaling.original_context_length"
		n, err := uintKey(f, key, h.Context)
		if err != nil {
			return err
		}
		if n <= 0 || n > h.TrainContext {
			return fmt.Errorf("%w: key %q = %v", ErrCorrupt, key, n)
		}
		h.Context = n
	}
	return nil
}
