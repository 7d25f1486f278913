package engine

import "fmt"

// qwen2: llama's block with biases on Q, K and V and NEOX RoPE.
// qwen3: llama's block with per-head RMSNorms of Q and K before NEOX RoPE,
// and a head size of its own (attention.key_length).
// qwen3moe: qwen3 with a mixture of experts for its FFN.
func init() {
	Register(&Arch{
		Name:    "qwen2",
		Read:    func(_ *File, h *HParams) error { h.NeoxRope, h.QKVBias = true, true; return nil },
		Globals: ropeFreqsGlobal,
		Tensors: func(h *HParams, _ int) []TensorSpec {
			return append(llamaTensors(h),
				TensorSpec{Name: "attn_q.bias", Dims: []int{h.QDim()}},
				TensorSpec{Name: "attn_k.bias", Dims: []int{h.KVDim()}},
				TensorSpec{Name: "attn_v.bias", Dims: []int{h.KVDim()}})
		},
		Block: func(o Ops, l *Layer, x Tensor) Tensor {
			return preNormBlock(o, l, x, standardRope(l.HP))
		},
	})
	Register(&Arch{
		Name:    "qwen3",
		Read:    func(_ *File, h *HParams) error { h.NeoxRope, h.QKNorm = true, true; return nil },
		Globals: ropeFreqsGlobal,
		Tensors: qwen3Tensors,
		Block: func(o Ops, l *Layer, x Tensor) Tensor {
			return preNormBlock(o, l, x, standardRope(l.HP))
		},
	})
	Register(&Arch{
		Name: "qwen3moe",
		Read: func(_ *File, h *HParams) error {
			if !h.MoE() {
				return fmt.Errorf("%w: qwen3moe without %s.expert_count", ErrCorrupt, h.Arch)
			}
			h.NeoxRope, h.QKNorm = true, true
			return nil
		},
		Globals: ropeFreqsGlobal,
		Tensors: qwen3Tensors, // llamaTensors gives the experts
		Block: func(o Ops, l *Layer, x Tensor) Tensor {
			return preNormBlock(o, l, x, standardRope(l.HP))
		},
		Experts: true,
	})
}

// qwen3Tensors are llama's with per-head Q and K norms.
func qwen3Tensors(h *HParams, _ int) []TensorSpec {
	return append(llamaTensors(h),
		TensorSpec{Name: "attn_q_norm.weight", Dims: []int{h.HeadDim}},
		TensorSpec{Name: "attn_k_norm.weight", Dims: []int{h.HeadDim}})
}
