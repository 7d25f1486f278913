package layers

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
)

// ErrBadSpec reports a model or hardware spec that cannot be used.
var ErrBadSpec = errors.New("layers: bad spec")

// ErrUnknownModel reports a model name that is not in the built-in table.
var ErrUnknownModel = errors.New("layers: unknown model")

// HyperParams are the raw hyper-parameters of a decoder-only transformer,
// as a GGUF header or a config file gives them.
type HyperParams struct {
	Name    string
	Layers  int
	Hidden  int
	Heads   int
	KVHeads int // 0 means the same as Heads (no GQA)
	// HeadDim is one attention head's width; 0 means Hidden/Heads. Qwen3
	// sets its own (128 with 64 heads on a 4096 model). With multi-head
	// latent attention it is the query/key part without rotary position
	// (DeepSeek's qk_nope_head_dim).
	HeadDim int
	FFN     int // a dense layer's FFN width
	Vocab   int
	// Mixture of experts. Experts 0 or 1: dense. ExpertFFN is one routed
	// expert's FFN width (0: FFN, as in Mixtral); SharedExperts are
	// experts of that width every token uses (DeepSeek's
	// n_shared_experts); the first DenseLayers layers have a dense FFN of
	// width FFN instead (DeepSeek's first_k_dense_replace).
	Experts       int
	ActiveExperts int // routed experts each token uses; 0 means 1 for MoE
	ExpertFFN     int
	SharedExperts int
	DenseLayers   int
	// Multi-head latent attention (DeepSeek-V2/V3), on when KVLoRARank > 0:
	// keys and values are cached as one compressed latent of KVLoRARank
	// plus a shared rotary key of RopeHeadDim per token and layer; queries
	// go through a rank-QLoRARank bottleneck (0: none); VHeadDim is a
	// value head's width (0: HeadDim).
	KVLoRARank  int
	QLoRARank   int
	RopeHeadDim int
	VHeadDim    int

	BytesPerParam float64 // weight bytes per parameter: 2 for fp16, 1.0625 for Q8_0
	KVBytes       float64 // bytes per KV element; 0 means 2 (fp16 cache)
	WireBytes     float64 // bytes per activation element on the wire; 0 means 4 (float32)
	TiedEmbedding bool    // output head shares the token embedding
}

// ModelSpec is a validated model shape with its derived sizes. Sizes are
// per layer unless the name says otherwise.
type ModelSpec struct {
	HyperParams
	headDim int
}

// NewModelSpec validates raw hyper-parameters and fills defaults.
func NewModelSpec(h HyperParams) (ModelSpec, error) {
	if h.KVHeads == 0 {
		h.KVHeads = h.Heads
	}
	if h.KVBytes == 0 {
		h.KVBytes = 2
	}
	if h.WireBytes == 0 {
		h.WireBytes = 4
	}
	moe := h.Experts > 1
	if moe && h.ActiveExperts == 0 {
		h.ActiveExperts = 1
	}
	if moe && h.ExpertFFN == 0 {
		h.ExpertFFN = h.FFN
	}
	bad := func(field string, v any) (ModelSpec, error) {
		return ModelSpec{}, fmt.Errorf("%w: model %q: %s = %v", ErrBadSpec, h.Name, field, v)
	}
	switch {
	case h.Layers <= 0:
		return bad("layers", h.Layers)
	case h.Hidden <= 0:
		return bad("hidden", h.Hidden)
	case h.Heads <= 0 || (h.HeadDim == 0 && h.Hidden%h.Heads != 0):
		return bad("heads", h.Heads)
	case h.HeadDim < 0:
		return bad("head_dim", h.HeadDim)
	case h.KVHeads <= 0 || h.Heads%h.KVHeads != 0:
		return bad("kv_heads", h.KVHeads)
	case h.FFN <= 0:
		return bad("ffn", h.FFN)
	case h.Vocab <= 0:
		return bad("vocab", h.Vocab)
	case h.Experts < 0 || h.ActiveExperts < 0 || (moe && h.ActiveExperts > h.Experts):
		return bad("experts", fmt.Sprintf("%d/%d", h.ActiveExperts, h.Experts))
	case !moe && (h.ActiveExperts > 1 || h.ExpertFFN != 0 || h.SharedExperts != 0):
		// Expert fields on a dense model are a mistake, not a default.
		return bad("experts", fmt.Sprintf("%d (expert fields need experts > 1)", h.Experts))
	case h.ExpertFFN < 0 || h.SharedExperts < 0:
		return bad("expert_ffn/shared_experts", fmt.Sprintf("%d/%d", h.ExpertFFN, h.SharedExperts))
	case h.DenseLayers < 0 || (h.DenseLayers > 0 && !moe) || h.DenseLayers >= h.Layers:
		return bad("dense_layers", h.DenseLayers)
	case h.KVLoRARank < 0 || h.QLoRARank < 0 || h.RopeHeadDim < 0 || h.VHeadDim < 0:
		return bad("mla", fmt.Sprintf("kv_lora_rank %d, q_lora_rank %d, rope %d, v %d", h.KVLoRARank, h.QLoRARank, h.RopeHeadDim, h.VHeadDim))
	case h.KVLoRARank == 0 && (h.QLoRARank != 0 || h.RopeHeadDim != 0 || h.VHeadDim != 0):
		return bad("kv_lora_rank", "0 (latent attention fields need kv_lora_rank > 0)")
	case !(h.BytesPerParam > 0) || h.BytesPerParam > 8:
		return bad("bytes_per_param", h.BytesPerParam)
	case !(h.KVBytes > 0) || h.KVBytes > 8:
		return bad("kv_bytes", h.KVBytes)
	case !(h.WireBytes > 0) || h.WireBytes > 8:
		return bad("wire_bytes", h.WireBytes)
	}
	hd := h.HeadDim
	if hd == 0 {
		hd = h.Hidden / h.Heads
	}
	if h.KVLoRARank > 0 && h.VHeadDim == 0 {
		h.VHeadDim = hd
	}
	return ModelSpec{HyperParams: h, headDim: hd}, nil
}

// HeadDim is the size of one attention head (for latent attention, the
// query/key part without rotary position).
func (m ModelSpec) HeadDim() int { return m.headDim }

// MoE reports whether the model is a mixture of experts.
func (m ModelSpec) MoE() bool { return m.Experts > 1 }

// MLA reports whether the model uses multi-head latent attention.
func (m ModelSpec) MLA() bool { return m.KVLoRARank > 0 }

// DenseLayer reports whether layer l has a dense FFN (every layer of a
// dense model; the first DenseLayers of a mixture of experts).
func (m ModelSpec) DenseLayer(l int) bool { return !m.MoE() || l < m.DenseLayers }

func (m ModelSpec) attnParams() float64 {
	h, nh := float64(m.Hidden), float64(m.Heads)
	if m.MLA() {
		// DeepSeek-V3's modeling code: q_a (h×qr) and its norm, q_b
		// (qr × heads·(nope+rope)) or a plain q (h × heads·(nope+rope));
		// kv_a (h × (kvr+rope)) and its norm; kv_b (kvr × heads·(nope+v));
		// o (heads·v × h).
		qk := float64(m.headDim + m.RopeHeadDim)
		kvr, qr := float64(m.KVLoRARank), float64(m.QLoRARank)
		q := h * nh * qk
		if m.QLoRARank > 0 {
			q = h*qr + qr + qr*nh*qk
		}
		kv := h*(kvr+float64(m.RopeHeadDim)) + kvr + kvr*nh*float64(m.headDim+m.VHeadDim)
		return q + kv + nh*float64(m.VHeadDim)*h
	}
	q, kv := nh*float64(m.headDim), float64(m.KVHeads*m.headDim)
	return 2*h*q + 2*h*kv // Q and O are h×(heads·head); K and V are h×kv
}

func (m ModelSpec) expertParams() float64 { return 3 * float64(m.Hidden) * float64(m.ExpertFFN) }

// ffnParams is the FFN (or MoE block) of one dense or one MoE layer.
func (m ModelSpec) ffnParams(dense bool) float64 {
	h := float64(m.Hidden)
	if dense {
		return 3 * h * float64(m.FFN)
	}
	return float64(m.Experts+m.SharedExperts)*m.expertParams() + h*float64(m.Experts) // router
}

// LayerParamsAt is the exact parameter count of layer l, every expert included.
func (m ModelSpec) LayerParamsAt(l int) float64 {
	return m.attnParams() + m.ffnParams(m.DenseLayer(l)) + 2*float64(m.Hidden)
}

// LayerParams is the parameter count of one layer as the planner counts
// it, every expert included: the largest layer. The planner takes every
// layer to cost the same, so a model whose first layers are dense
// (DeepSeek-V3: 3 of 61) is planned as if they were as big as its MoE
// layers: memory is never overcommitted, and the overcount is the dense
// layers' difference (about 5% of DeepSeek-V3's weights).
func (m ModelSpec) LayerParams() float64 {
	// Layer 0 is dense if any is; the last layer is MoE if any is.
	return math.Max(m.LayerParamsAt(0), m.LayerParamsAt(m.Layers-1))
}

// LayerWeightBytes is the memory one layer's weights take (LayerParams).
func (m ModelSpec) LayerWeightBytes() float64 { return m.LayerParams() * m.BytesPerParam }

// LayerWeightBytesAt is the memory layer l's weights take, exactly.
func (m ModelSpec) LayerWeightBytesAt(l int) float64 { return m.LayerParamsAt(l) * m.BytesPerParam }

// LayerReadBytes is the weight bytes one decode step of a full batch reads
// from one layer: every expert, as a batch large enough to touch them all
// does.
func (m ModelSpec) LayerReadBytes() float64 { return m.LayerWeightBytes() }

// TouchedExperts is the expected number of distinct routed experts that
// b tokens use in one MoE layer, under uniform routing: each token picks k
// of E, so an expert is missed by all b with probability (1−k/E)^b, and
// E·(1−(1−k/E)^b) are touched. Zero for a dense model.
func (m ModelSpec) TouchedExperts(b int) float64 {
	if !m.MoE() || b <= 0 {
		return 0
	}
	E, k := float64(m.Experts), float64(m.ActiveExperts)
	return E * (1 - math.Pow(1-k/E, float64(b)))
}

// LayerReadBytesBatch is the weight bytes one step of b tokens reads from
// one (MoE) layer: all but the routed experts, plus the experts the batch
// touches (TouchedExperts). A dense model reads the whole layer.
func (m ModelSpec) LayerReadBytesBatch(b int) float64 {
	if !m.MoE() {
		return m.LayerWeightBytes()
	}
	b = max(b, 1)
	last := m.Layers - 1 // an MoE layer
	routed := float64(m.Experts) * m.expertParams()
	read := m.LayerParamsAt(last) - routed + m.TouchedExperts(b)*m.expertParams()
	if m.DenseLayers > 0 { // the planner's layer is the larger kind
		read = math.Max(read, m.LayerParamsAt(0))
	}
	return read * m.BytesPerParam
}

// KVBytesPerToken is the KV cache one token takes in one layer: a key and
// a value per KV head, or with latent attention the compressed latent and
// the rotary key (kv_lora_rank + qk_rope_head_dim elements).
func (m ModelSpec) KVBytesPerToken() float64 {
	if m.MLA() {
		return float64(m.KVLoRARank+m.RopeHeadDim) * m.KVBytes
	}
	return 2 * float64(m.KVHeads*m.headDim) * m.KVBytes
}

// ActiveLayerParams is the parameters one token uses in one layer as the
// planner counts it (the largest layer): attention, the active and shared
// experts, the router.
func (m ModelSpec) ActiveLayerParams() float64 {
	return math.Max(m.activeParamsAt(0), m.activeParamsAt(m.Layers-1))
}

func (m ModelSpec) activeParamsAt(l int) float64 {
	if m.DenseLayer(l) {
		return m.LayerParamsAt(l)
	}
	h := float64(m.Hidden)
	return m.attnParams() + float64(m.ActiveExperts+m.SharedExperts)*m.expertParams() + h*float64(m.Experts) + 2*h
}

// attnWidth is the per-position width the attention reads for one token's
// scores and weighted sum: heads·head_dim each way, or with latent
// attention over the cached latent, heads·(kvr+rope) for scores and
// heads·kvr for the sum (the absorbed form that keeps the cache latent).
func (m ModelSpec) attnWidth() float64 {
	if m.MLA() {
		return float64(m.Heads) * float64(2*m.KVLoRARank+m.RopeHeadDim) / 2
	}
	return float64(m.Heads * m.headDim)
}

// FLOPsPerToken is the matrix FLOPs one token costs in one layer at
// context length ctx (2 per multiply-add of the active weights, plus the
// attention scores and the weighted sum over the context).
func (m ModelSpec) FLOPsPerToken(ctx int) float64 {
	h := float64(m.Hidden)
	active := m.ActiveLayerParams() - 2*h // norms are not matrix work
	return 2*active + 4*float64(ctx)*m.attnWidth()
}

// ActivationBytesPerToken is the size of one token's hidden state on the wire.
func (m ModelSpec) ActivationBytesPerToken() float64 { return float64(m.Hidden) * m.WireBytes }

// EmbeddingBytes is the memory of the token embedding, held by the first stage.
func (m ModelSpec) EmbeddingBytes() float64 {
	return float64(m.Vocab) * float64(m.Hidden) * m.BytesPerParam
}

// HeadBytes is the memory of the output norm and head, held by the last stage.
// A tied head still needs the embedding matrix on the last stage.
func (m ModelSpec) HeadBytes() float64 {
	return float64(m.Vocab)*float64(m.Hidden)*m.BytesPerParam + float64(m.Hidden)*m.BytesPerParam
}

// HeadFLOPsPerToken is the cost of the logits for one token.
func (m ModelSpec) HeadFLOPsPerToken() float64 { return 2 * float64(m.Vocab) * float64(m.Hidden) }

// TotalParams is the parameter count of the whole model, each layer exactly.
func (m ModelSpec) TotalParams() float64 {
	emb := float64(m.Vocab) * float64(m.Hidden)
	head := emb
	if m.TiedEmbedding {
		head = 0
	}
	sum := 0.0
	for l := range m.Layers {
		sum += m.LayerParamsAt(l)
	}
	return sum + emb + head + float64(m.Hidden)
}

// ActiveParams is the parameters one token uses in the whole model, each
// layer exactly: what "A22B" or "37B activated" counts (embedding lookup
// excluded, output head included).
func (m ModelSpec) ActiveParams() float64 {
	sum := 0.0
	for l := range m.Layers {
		sum += m.activeParamsAt(l)
	}
	return sum + float64(m.Vocab)*float64(m.Hidden) + float64(m.Hidden)
}

// Built-in model shapes, from each model's published config.json.
var builtinModels = map[string]HyperParams{
	"llama-3-8b": {Name: "llama-3-8b", Layers: 32, Hidden: 4096, Heads: 32, KVHeads: 8,
		FFN: 14336, Vocab: 128256, BytesPerParam: 2},
	"llama-3-70b": {Name: "llama-3-70b", Layers: 80, Hidden: 8192, Heads: 64, KVHeads: 8,
		FFN: 28672, Vocab: 128256, BytesPerParam: 2},
	"llama-3.1-405b": {Name: "llama-3.1-405b", Layers: 126, Hidden: 16384, Heads: 128, KVHeads: 8,
		FFN: 53248, Vocab: 128256, BytesPerParam: 2},
	"qwen2.5-7b": {Name: "qwen2.5-7b", Layers: 28, Hidden: 3584, Heads: 28, KVHeads: 4,
		FFN: 18944, Vocab: 152064, BytesPerParam: 2},
	"qwen2.5-72b": {Name: "qwen2.5-72b", Layers: 80, Hidden: 8192, Heads: 64, KVHeads: 8,
		FFN: 29568, Vocab: 152064, BytesPerParam: 2},
	"mixtral-8x7b": {Name: "mixtral-8x7b", Layers: 32, Hidden: 4096, Heads: 32, KVHeads: 8,
		FFN: 14336, Vocab: 32000, Experts: 8, ActiveExperts: 2, BytesPerParam: 2},
	// deepseek-ai/DeepSeek-V3 config.json: num_hidden_layers 61,
	// first_k_dense_replace 3, intermediate_size 18432, hidden_size 7168,
	// num_attention_heads 128, n_routed_experts 256, n_shared_experts 1,
	// num_experts_per_tok 8, moe_intermediate_size 2048, kv_lora_rank 512,
	// q_lora_rank 1536, qk_rope_head_dim 64, qk_nope_head_dim 128,
	// v_head_dim 128, vocab_size 129280 (the multi-token-prediction layer
	// is left out: llama.cpp does not run it).
	"deepseek-v3": {Name: "deepseek-v3", Layers: 61, Hidden: 7168, Heads: 128, HeadDim: 128,
		FFN: 18432, Vocab: 129280, Experts: 256, ActiveExperts: 8, ExpertFFN: 2048, SharedExperts: 1,
		DenseLayers: 3, KVLoRARank: 512, QLoRARank: 1536, RopeHeadDim: 64, VHeadDim: 128, BytesPerParam: 2},
	// Qwen/Qwen3-235B-A22B config.json: 94 layers, hidden 4096, 64 heads,
	// 4 KV heads, head_dim 128, 128 experts, 8 per token,
	// moe_intermediate_size 1536, vocab 151936, untied embeddings.
	"qwen3-235b-a22b": {Name: "qwen3-235b-a22b", Layers: 94, Hidden: 4096, Heads: 64, KVHeads: 4, HeadDim: 128,
		FFN: 12288, Vocab: 151936, Experts: 128, ActiveExperts: 8, ExpertFFN: 1536, BytesPerParam: 2},
	// Qwen/Qwen3-30B-A3B config.json: 48 layers, hidden 2048, 32 heads,
	// 4 KV heads, head_dim 128, 128 experts, 8 per token,
	// moe_intermediate_size 768, vocab 151936.
	"qwen3-30b-a3b": {Name: "qwen3-30b-a3b", Layers: 48, Hidden: 2048, Heads: 32, KVHeads: 4, HeadDim: 128,
		FFN: 6144, Vocab: 151936, Experts: 128, ActiveExperts: 8, ExpertFFN: 768, BytesPerParam: 2},
}

// q4KMBytesPerParam is Q4_K_M's mean size: 4.80 bits per weight, as
// llama.cpp's examples/quantize/README.md lists it for Llama 2 70B (Q4_K
// blocks, with Q6_K for half of attn_v and ffn_down).
const q4KMBytesPerParam = 4.80 / 8

// Model returns a built-in model by name (case-insensitive). A name may carry
// a weight format suffix: "llama-3-70b:q8_0" or ":fp16" (default), ":int4".
func Model(name string) (ModelSpec, error) {
	base, format, _ := strings.Cut(strings.ToLower(name), ":")
	h, ok := builtinModels[base]
	if !ok {
		return ModelSpec{}, fmt.Errorf("%w: %q (known: %s)", ErrUnknownModel, name, strings.Join(ModelNames(), ", "))
	}
	switch format {
	case "", "fp16", "f16", "bf16":
	case "q8_0", "int8":
		h.BytesPerParam = 34.0 / 32 // a Q8_0 block: 32 int8 weights and an fp16 scale
	case "q4_0", "int4":
		h.BytesPerParam = 18.0 / 32
	case "q4_k_m":
		h.BytesPerParam = q4KMBytesPerParam
	case "f32", "fp32":
		h.BytesPerParam = 4
	default:
		return ModelSpec{}, fmt.Errorf("%w: %q: weight format %q (known: fp16, q8_0, q4_0, q4_k_m, f32)", ErrUnknownModel, name, format)
	}
	if format != "" {
		h.Name = base + ":" + format
	}
	return NewModelSpec(h)
}

// ModelNames lists the built-in models, sorted.
func ModelNames() []string {
	names := make([]string, 0, len(builtinModels))
	for n := range builtinModels {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
