package engine

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
)

// This file is the seam between an architecture and the engines that run
// it. An architecture (arch_*.go) is written once, as an Arch: the tensors
// each layer holds and a Block that computes one layer against Ops. Each
// engine implements Ops with its own kernels: Local with this package's
// bit-reproducible ones over the whole batch of rows at once (ops.go), the
// ggml engine (engine/ggml) as nodes of one ggml graph. See
// docs/architectures.md.

// Tensor is an engine's handle on an activation: every row of a step, each
// row a vector of some width. Blocks only pass Tensors between Ops.
type Tensor any

// Weight is an engine's handle on a loaded weight (a vector or a matrix),
// as Layer.W returns it; nil stands for an absent optional tensor.
type Weight any

// Ops are the operations a Block is written against. Each works on all
// rows of the step at once. An op may reuse the storage of its first
// Tensor argument (Add, AddBias, Rope, SwiGLU, GELU and Scale do, on the
// Go engine): a block must not use a Tensor again after passing it there.
//
// Ops do not return errors: an engine that cannot do an op (or a variant
// of one) records the failure, the step fails with it, and what the op
// returned is not looked at.
type Ops interface {
	// RMSNorm normalises each run of len(w) values (a whole row, or one
	// head where w is a head wide, as qwen3's Q/K norms) to unit root mean
	// square, plus eps, then multiplies it by w.
	RMSNorm(x Tensor, w Weight, eps float32) Tensor
	// Linear is x·Wᵀ: each row of x times each row of the matrix W.
	Linear(x Tensor, w Weight) Tensor
	// Linears is Linear of one input with several matrices (Q, K and V;
	// gate and up), which an engine may compute together.
	Linears(x Tensor, ws ...Weight) []Tensor
	// AddBias adds the vector b to each row of x.
	AddBias(x Tensor, b Weight) Tensor
	// Rope rotates each head of x (rows of heads × r.Dims values) by its
	// row's position.
	Rope(x Tensor, r Rope) Tensor
	// Attention writes k and v (rows of KVHeads × HeadDim) into the
	// session's cache at the rows' positions and returns, for every row
	// and head, softmax(q·Kᵀ·scale)·V over the positions up to the row's
	// own (heads share KV heads in groups, in order).
	Attention(q, k, v Tensor, a Attn) Tensor
	// SwiGLU is silu(gate)·up, element by element.
	SwiGLU(gate, up Tensor) Tensor
	// Add is a + b, element by element (the residual stream).
	Add(a, b Tensor) Tensor

	// MoE is a mixture-of-experts FFN: each row goes through the TopK
	// experts its router scores highest, their outputs weighed (Go engine:
	// moe.go; ggml: mul_mat_id).
	MoE(x Tensor, m MoE) Tensor

	// GELU is gelu(gate)·up, element by element (gemma's gated FFN): the
	// tanh approximation as ggml's CPU computes it, through an F16 table
	// (engine.WithExactGELU: the formula, as ggml's GPU kernels).
	GELU(gate, up Tensor) Tensor
	// Scale multiplies every value of x by s (gemma's embedding scaling).
	Scale(x Tensor, s float32) Tensor

	// Slice keeps values [lo, hi) of each run of every values (one head
	// of a row): deepseek2's split of Q and of its KV projection.
	Slice(x Tensor, every, lo, hi int) Tensor
	// Concat joins, per head, aw values of a then bw values of b; the
	// one that has a single head per row is repeated for every head of
	// the other (deepseek2's shared RoPE part of K).
	Concat(a, b Tensor, aw, bw int) Tensor
	// HeadLinear multiplies each head of x by its own matrix: w is a 3-D
	// weight of heads × rows × cols (GGUF dims [cols, rows, heads]), x
	// rows of heads × cols; the result rows of heads × rows (deepseek2's
	// attn_k_b and attn_v_b).
	HeadLinear(x Tensor, w Weight) Tensor
}

// Rope is one RoPE variant. It is comparable, so that an engine can keep
// its cos/sin tables per variant.
type Rope struct {
	Dims int // values rotated per head: the head size
	// Neox rotates pairs (i, i+Dims/2); otherwise consecutive pairs
	// (2i, 2i+1), as GGUF stores llama's Q and K.
	Neox bool
	Base float32 // frequencies are Base^(-2i/Dims)
	// Factors names a global tensor (Arch.Globals) of Dims/2 divisors of
	// the frequencies (llama 3.1's rope_freqs, phi3's LongRoPE factors);
	// "" for none.
	Factors string
	// AttnFactor scales cos and sin (LongRoPE's attention factor, times
	// YaRN's correction as llama.cpp passes it; HParams.RopeExt); 0 or 1
	// for none.
	AttnFactor float32
	// Linear or YaRN scaling, as ggml_rope_ext takes it: FreqScale (0 or
	// 1: none), YaRN's ExtFactor (0: none) and its ramp between BetaFast
	// and BetaSlow over OrigContext.
	OrigContext                              int
	FreqScale, ExtFactor, BetaFast, BetaSlow float32
}

// freqScale is FreqScale, 1 where unset.
func (r Rope) freqScale() float32 {
	if r.FreqScale == 0 {
		return 1
	}
	return r.FreqScale
}

// mscale is the factor cos and sin are scaled by after rounding:
// AttnFactor, times 1 + 0.1·ln(1/FreqScale) where YaRN's ExtFactor is not
// 0, as ggml's rope_yarn takes it.
func (r Rope) mscale() float32 {
	m := r.AttnFactor
	if r.ExtFactor != 0 {
		m *= 1 + float32(0.1*logf(1/r.freqScale()))
	}
	return m
}

// scale applies linear or YaRN scaling to RoPE's inverse frequencies
// (ropeFreqs' base^(-2i/d)/factor): θ = pos·f·(s·(1−r) + r), s the
// frequency scale and r YaRN's ramp times ExtFactor, which is ggml's
// rope_yarn theta_interp·(1−r) + theta_extrap·r; the ramp's corner
// dimensions are ggml_rope_yarn_corr_dims', in float32 as there.
func (r Rope) scale(freqs []float32) {
	s32 := r.freqScale()
	if s32 == 1 && r.ExtFactor == 0 {
		return // f·1, the same bits
	}
	d := float32(r.Dims)
	corr := func(beta float32) float32 {
		return d * logf(float32(r.OrigContext)/float32(beta*2*float32(math.Pi))) / float32(2*logf(r.Base))
	}
	low := max(0, float32(math.Floor(float64(corr(r.BetaFast)))))
	high := min(d-1, float32(math.Ceil(float64(corr(r.BetaSlow)))))
	s := float64(s32)
	for i, f := range freqs {
		ramp := 0.0
		if r.ExtFactor != 0 {
			y := (float32(i) - low) / max(0.001, high-low)
			ramp = float64(float32((1 - min(1, max(0, y))) * r.ExtFactor))
		}
		freqs[i] = float32(float64(f) * (s*(1-ramp) + ramp))
	}
}

// Attn is one attention variant.
type Attn struct {
	Heads, KVHeads, HeadDim int
	// Scale multiplies the scores; 0 is 1/√HeadDim.
	Scale float32

	// Window is a sliding window: a row attends to its last Window
	// positions only, itself included (0: all); key p0 is masked for
	// query p1 where p1−p0 ≥ Window, as llama.cpp's SWA mask.
	Window int
	// Sinks names a layer tensor of per-head attention-sink logits, which
	// join each head's softmax without a value ("" for none).
	Sinks string
	// SoftCap turns each raw score s (before Scale) into
	// SoftCap·tanh(s/SoftCap) (0: none), as llama.cpp's gemma2.
	SoftCap float32
	// VDim is the width of a V head where it differs from HeadDim (0:
	// HeadDim). With v nil, V is the last VDim values of each K head
	// (deepseek2's absorbed MLA, whose V is the latent K holds): only K
	// is cached.
	VDim int
}

// vDim is the width of a V head.
func (a Attn) vDim() int {
	if a.VDim == 0 {
		return a.HeadDim
	}
	return a.VDim
}

// MoE is a mixture-of-experts FFN with a softmax router.
type MoE struct {
	Router         Weight // [experts × dim]
	Gate, Up, Down Weight // experts as 3-D tensors [experts × rows × cols]
	TopK           int
	// NormTopK renormalises the chosen experts' weights to sum to 1 (the
	// Go engine runs only this, as qwen3moe and Mixtral need).
	NormTopK bool
	// GELU uses gelu(gate)·up instead of silu(gate)·up (not implemented).
	GELU bool

	// gpt-oss's variant (llama.cpp's SOFTMAX_WEIGHT gating and
	// SWIGLU_OAI_MOE experts):

	// RouterBias is added to the router's logits; nil for none.
	RouterBias Weight // [experts]
	// GateBias, UpBias and DownBias are the experts' biases, one row per
	// expert; nil for none.
	GateBias, UpBias, DownBias Weight // [experts × rows]
	// WeighChosen picks the TopK experts by their logits and weighs them by
	// a softmax over those TopK logits only (NormTopK is then unused).
	WeighChosen bool
	// OAI uses gpt-oss's clamped activation instead of silu(gate)·up:
	// g·σ(OAIAlpha·g)·(u+1), g = min(gate, OAILimit) and u = up clamped to
	// ±OAILimit.
	OAI                bool
	OAIAlpha, OAILimit float32

	// deepseek2's variant (llama.cpp's build_moe_ffn as its graph calls
	// it): DeepSeek set, the chosen weights are renormalised only where
	// NormTopK is set, then multiplied by WeightScale.
	DeepSeek bool
	// Sigmoid turns the logits into probabilities by a sigmoid each
	// (expert_gating_func 2) instead of a softmax.
	Sigmoid bool
	// SelectBias (exp_probs_b) is added to the probabilities to choose
	// the experts only; the weights are the unbiased probabilities. nil
	// for none.
	SelectBias Weight // [experts]
	// Groups > 1 limits the choice to the GroupsUsed groups (of
	// Experts/Groups consecutive experts) whose two best probabilities
	// sum highest.
	Groups, GroupsUsed int
	WeightScale        float32
}

// TensorSpec is a tensor an architecture reads from the file.
type TensorSpec struct {
	// Name is the file's name, without "blk.N." for a layer's tensor.
	Name string
	// Dims are GGUF's dims, fastest first: {n} for a vector, {cols, rows}
	// for a matrix.
	Dims []int
	// Optional tensors may be absent (Layer.W is then nil).
	Optional bool
	// Fused names a tensor that may hold this one's rows instead, after
	// those of the specs before it that name the same tensor (phi3's
	// attn_qkv holds Q, K and V; its ffn_up holds gate then up). The file
	// is read fused where it has that tensor with all the parts' rows.
	Fused string
}

// Arch is one architecture's definition: what it reads and how one layer
// computes. Adding an architecture is adding one (see docs/architectures.md).
type Arch struct {
	Name string
	// Read sets what the architecture adds to the common hyper-parameters
	// (flags, its own keys and checks); nil for nothing.
	Read func(f *File, h *HParams) error
	// Globals are tensors outside the layers that the blocks refer to
	// (RoPE factors), loaded by every stage; nil for none.
	Globals func(h *HParams) []TensorSpec
	// Tensors are the weights of one layer.
	Tensors func(h *HParams, layer int) []TensorSpec
	// Block computes one layer: the residual stream x in, x out.
	Block func(o Ops, l *Layer, x Tensor) Tensor
	// Experts: the architecture's FFN may be a mixture of experts
	// (<arch>.expert_count > 0; HParams.Experts and the like are then
	// read). Files of the others with experts are refused.
	Experts bool
	// DeepSeekMoE: its experts may come with shared experts, leading
	// dense layers, sigmoid gating, group-limited routing and a selection
	// bias (deepseek2), which are read and checked for it.
	DeepSeekMoE bool
	// OwnHeads: Read sets the head sizes itself (deepseek2's MLA), so a
	// value length or a RoPE width other than the key length is not
	// refused before it (HParams.VHeadDim and RopeDims hold them).
	OwnHeads bool
}

// Layer is what a Block sees of its layer.
type Layer struct {
	Index int
	HP    *HParams
	// Weights holds the engine's handles by TensorSpec.Name.
	Weights map[string]Weight
}

// W is the layer's weight of that name, nil where the file has none.
func (l *Layer) W(name string) Weight { return l.Weights[name] }

var (
	archMu sync.RWMutex
	archs  = map[string]*Arch{}
)

// Register adds an architecture, under a.Name (general.architecture);
// each arch_*.go registers its own from init. It panics on a name
// registered before.
func Register(a *Arch) {
	archMu.Lock()
	defer archMu.Unlock()
	if archs[a.Name] != nil {
		panic("engine: architecture " + a.Name + " registered twice")
	}
	archs[a.Name] = a
}

// Architecture is the definition of the named architecture.
func Architecture(name string) (*Arch, error) {
	archMu.RLock()
	a := archs[name]
	archMu.RUnlock()
	if a == nil {
		return nil, fmt.Errorf("%w: %q (supported: %s)", ErrUnsupportedArch, name, strings.Join(Architectures(), ", "))
	}
	return a, nil
}

// Architectures are the names of the architectures the engines run, sorted.
func Architectures() []string {
	archMu.RLock()
	defer archMu.RUnlock()
	var out []string
	for n := range archs {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// TensorLoad is one tensor of the file that an engine reads, and the
// weights it holds: one part covering all its rows, or the parts of a
// fused tensor.
type TensorLoad struct {
	Name  string // in the file
	Dims  []int  // expected GGUF dims
	Parts []TensorPart
}

// TensorPart is the weight Name, rows [Lo, Hi) of its tensor.
type TensorPart struct {
	Name   string
	Lo, Hi int
}

// Plan resolves specs against f: which tensors to read (prefix, "blk.N."
// or "", before each name) and which weights each holds. Absent optional
// tensors are left out; an absent required one is ErrCorrupt.
func Plan(f *File, prefix string, specs []TensorSpec) ([]TensorLoad, error) {
	var out []TensorLoad
	for i := 0; i < len(specs); {
		sp := specs[i]
		if sp.Fused != "" {
			// The run of specs that may share this fused tensor.
			j, rows := i, 0
			for j < len(specs) && specs[j].Fused == sp.Fused {
				if len(specs[j].Dims) != 2 {
					return nil, fmt.Errorf("%w: %q: only matrices are fused, not dims %v", ErrShape, prefix+specs[j].Name, specs[j].Dims)
				}
				rows += specs[j].Dims[1]
				j++
			}
			if t, ok := f.Tensor(prefix + sp.Fused); ok && len(t.Dims) == 2 && t.Dims[1] == uint64(rows) {
				ld := TensorLoad{Name: prefix + sp.Fused, Dims: []int{sp.Dims[0], rows}}
				lo := 0
				for _, p := range specs[i:j] {
					ld.Parts = append(ld.Parts, TensorPart{Name: p.Name, Lo: lo, Hi: lo + p.Dims[1]})
					lo += p.Dims[1]
				}
				out = append(out, ld)
				i = j
				continue
			}
		}
		i++
		if _, ok := f.Tensor(prefix + sp.Name); !ok {
			if sp.Optional {
				continue
			}
			return nil, fmt.Errorf("%w: missing tensor %q", ErrCorrupt, prefix+sp.Name)
		}
		rows := 1
		if len(sp.Dims) > 1 {
			rows = sp.Dims[1]
		}
		out = append(out, TensorLoad{Name: prefix + sp.Name, Dims: sp.Dims, Parts: []TensorPart{{Name: sp.Name, Lo: 0, Hi: rows}}})
	}
	return out, nil
}

// LayerPrefix is the file's prefix of layer i's tensors.
func LayerPrefix(i int) string { return fmt.Sprintf("blk.%d.", i) }
