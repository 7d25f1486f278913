package layers

import (
	"errors"
	"fmt"
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
	Name          string
	Layers        int
	Hidden        int
	Heads         int
	KVHeads       int // 0 means the same as Heads (no GQA)
	FFN           int
	Vocab         int
	Experts       int     // 0 or 1: dense
	ActiveExperts int     // experts each token uses; 0 means 1 for MoE
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
	if h.Experts > 1 && h.ActiveExperts == 0 {
		h.ActiveExperts = 1
	}
	bad := func(field string, v any) (ModelSpec, error) {
		return ModelSpec{}, fmt.Errorf("%w: model %q: %s = %v", ErrBadSpec, h.Name, field, v)
	}
	switch {
	case h.Layers <= 0:
		return bad("layers", h.Layers)
	case h.Hidden <= 0:
		return bad("hidden", h.Hidden)
	case h.Heads <= 0 || h.Hidden%h.Heads != 0:
		return bad("heads", h.Heads)
	case h.KVHeads <= 0 || h.Heads%h.KVHeads != 0:
		return bad("kv_heads", h.KVHeads)
	case h.FFN <= 0:
		return bad("ffn", h.FFN)
	case h.Vocab <= 0:
		return bad("vocab", h.Vocab)
	case h.Experts < 0 || h.ActiveExperts < 0 || (h.Experts > 1 && h.ActiveExperts > h.Experts):
		return bad("experts", fmt.Sprintf("%d/%d", h.ActiveExperts, h.Experts))
	case !(h.BytesPerParam > 0) || h.BytesPerParam > 8:
		return bad("bytes_per_param", h.BytesPerParam)
	case !(h.KVBytes > 0) || h.KVBytes > 8:
		return bad("kv_bytes", h.KVBytes)
	case !(h.WireBytes > 0) || h.WireBytes > 8:
		return bad("wire_bytes", h.WireBytes)
	}
	return ModelSpec{HyperParams: h, headDim: h.Hidden / h.Heads}, nil
}

// HeadDim is the size of one attention head.
func (m ModelSpec) HeadDim() int { return m.headDim }

func (m ModelSpec) experts() (all, active float64) {
	if m.Experts > 1 {
		return float64(m.Experts), float64(m.ActiveExperts)
	}
	return 1, 1
}

func (m ModelSpec) attnParams() float64 {
	h, kv := float64(m.Hidden), float64(m.KVHeads*m.headDim)
	return 2*h*h + 2*h*kv // Q and O are h×h; K and V are h×kv
}

// LayerParams is the parameter count of one layer, every expert included.
func (m ModelSpec) LayerParams() float64 {
	all, _ := m.experts()
	h := float64(m.Hidden)
	router := 0.0
	if m.Experts > 1 {
		router = h * all
	}
	return m.attnParams() + all*3*h*float64(m.FFN) + router + 2*h
}

// LayerWeightBytes is the memory one layer's weights take.
func (m ModelSpec) LayerWeightBytes() float64 { return m.LayerParams() * m.BytesPerParam }

// LayerReadBytes is the weight bytes one decode step of a full batch reads
// from one layer. For a mixture of experts this assumes a batch large enough
// to touch every expert, which is the conservative choice.
func (m ModelSpec) LayerReadBytes() float64 { return m.LayerWeightBytes() }

// KVBytesPerToken is the KV cache one token takes in one layer.
func (m ModelSpec) KVBytesPerToken() float64 {
	return 2 * float64(m.KVHeads*m.headDim) * m.KVBytes
}

// FLOPsPerToken is the matrix FLOPs one token costs in one layer at
// context length ctx (2 per multiply-add of the active weights, plus the
// attention scores and the weighted sum over the context).
func (m ModelSpec) FLOPsPerToken(ctx int) float64 {
	_, active := m.experts()
	h := float64(m.Hidden)
	dense := m.attnParams() + active*3*h*float64(m.FFN)
	return 2*dense + 4*float64(ctx)*h
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

// TotalParams is the parameter count of the whole model.
func (m ModelSpec) TotalParams() float64 {
	emb := float64(m.Vocab) * float64(m.Hidden)
	head := emb
	if m.TiedEmbedding {
		head = 0
	}
	return float64(m.Layers)*m.LayerParams() + emb + head + float64(m.Hidden)
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
}

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
	case "f32", "fp32":
		h.BytesPerParam = 4
	default:
		return ModelSpec{}, fmt.Errorf("%w: %q: weight format %q (known: fp16, q8_0, q4_0, f32)", ErrUnknownModel, name, format)
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
