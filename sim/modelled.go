package sim

import (
	"fmt"
	"math"
	"strings"

	"github.com/stratanet/strata/layers"
)

// ModelledModel is a model with no measured profile: one of package
// layers' built-in models (layers.Model, e.g. "deepseek-v3:q4_k_m") on
// machines from its device table (rtx3090, rtx4090, rtx5090, a6000, ...).
// Layer times come from the cost model's roofline, so they are modelled,
// not measured: for a mixture of experts a batch reads the experts its
// tokens touch (layers.ModelSpec.LayerReadBytesBatch).
type ModelledModel struct {
	// Model is a layers built-in name with its weight format.
	Model string `yaml:"model"`
	// Wire is the hidden states' dtype between nodes: f32 (default), f16
	// or q8 (node --wire; auto picks q8 below 100 Mbit/s).
	Wire string `yaml:"wire"`
	// MaxBatch caps a batch's sequences (node.DefaultMaxBatch if 0).
	MaxBatch int `yaml:"max_batch"`
	// ContextTokens is the context a decode token attends over, for its
	// KV reads and attention FLOPs (layers.DefaultSessionTokens if 0).
	ContextTokens int `yaml:"context_tokens"`
}

func (mm *ModelledModel) validate() error {
	if mm.Model == "" || mm.MaxBatch < 0 || mm.ContextTokens < 0 {
		return fmt.Errorf("%w: modelled model %+v", ErrScenario, *mm)
	}
	if _, err := wireBytes(mm.Wire); err != nil {
		return err
	}
	return nil
}

// wireBytes is a wire dtype's bytes per value (node/wiremode.go).
func wireBytes(w string) (float64, error) {
	switch strings.ToLower(w) {
	case "", "f32":
		return 4, nil
	case "f16":
		return 2, nil
	case "q8":
		return 1.125, nil
	}
	return 0, fmt.Errorf("%w: wire %q (want f32, f16 or q8)", ErrScenario, w)
}

func (mm *ModelledModel) spec() (layers.ModelSpec, error) {
	m, err := layers.Model(mm.Model)
	if err != nil {
		return layers.ModelSpec{}, fmt.Errorf("%w: %w", ErrScenario, err)
	}
	wb, err := wireBytes(mm.Wire)
	if err != nil {
		return layers.ModelSpec{}, err
	}
	h := m.HyperParams
	h.WireBytes = wb
	return layers.NewModelSpec(h)
}

func (mm *ModelledModel) context() int {
	if mm.ContextTokens > 0 {
		return mm.ContextTokens
	}
	return layers.DefaultSessionTokens
}

func (mm *ModelledModel) maxBatch() int {
	if mm.MaxBatch > 0 {
		return mm.MaxBatch
	}
	return 64 // node.DefaultMaxBatch
}

// wire: a token id and framing between the entry and a node; hidden
// states in the wire dtype between nodes.
func (mm *ModelledModel) wire(m layers.ModelSpec) ModelWire {
	return ModelWire{Layers: m.Layers, TokenBytes: 64, ActivationBytes: m.ActivationBytesPerToken()}
}

// rooflineTimer is one layer's time on one machine from the cost model:
// the weights the batch's tokens touch and the decode tokens' KV cache
// read once, against the FLOPs, whichever takes longer.
type rooflineTimer struct {
	m   layers.ModelSpec
	h   layers.Hardware
	ctx int
	// Per-token constants, hoisted: decode FLOPs at ctx, prompt FLOPs at
	// ctx/2 (a prompt attends to half of itself on average), KV bytes.
	fDec, fPre, kv float64
}

func newRooflineTimer(m layers.ModelSpec, h layers.Hardware, ctx int) rooflineTimer {
	return rooflineTimer{m: m, h: h, ctx: ctx, fDec: m.FLOPsPerToken(ctx), fPre: m.FLOPsPerToken(ctx / 2),
		kv: m.KVBytesPerToken()}
}

func (t rooflineTimer) LayerTime(promptTokens, decodeTokens int) float64 {
	n := promptTokens + decodeTokens
	if n <= 0 {
		return 0
	}
	bytes := t.m.LayerReadBytesBatch(n) + float64(decodeTokens)*float64(t.ctx)*t.kv + float64(promptTokens)*t.kv
	flops := float64(decodeTokens)*t.fDec + float64(promptTokens)*t.fPre
	return math.Max(bytes/t.h.MemBandwidth, flops/t.h.FLOPS())
}

// modelledTables are a machine's batch caps and KV memory (token×layer
// units) for each layer count it may hold: what memory leaves beside
// the layers' weights after the cost model's reserve.
func (mm *ModelledModel) tables(m layers.ModelSpec, h layers.Hardware, maxL int) ([]Caps, []int64) {
	p := layers.DefaultCostParams()
	usable := h.MemoryBytes * (1 - p.MemoryReserve)
	b := mm.maxBatch()
	caps := make([]Caps, maxL)
	kv := make([]int64, maxL)
	for k := 1; k <= maxL; k++ {
		caps[k-1] = Caps{PromptMaxRequests: b, PromptMaxTokens: 2048, DecodeMaxTokens: b, DecodeMaxContext: 1 << 30}
		free := usable - float64(k)*m.LayerWeightBytes()
		kv[k-1] = int64(math.Max(math.Floor(free/m.KVBytesPerToken()), 0))
	}
	return caps, kv
}

// modelledMachine is a device of layers' table with the node's uplink
// (its link class's bandwidth) and the most layers it holds with room
// for one session's cache.
func modelledMachine(m layers.ModelSpec, gpu string, uplink float64) (layers.Hardware, int, error) {
	h, err := layers.Device(gpu)
	if err != nil {
		return layers.Hardware{}, 0, fmt.Errorf("%w: %w", ErrScenario, err)
	}
	h.NetBandwidth = uplink
	ml := layers.NewProfile(m, layers.Node{ID: gpu, Hardware: h}, layers.DefaultCostParams()).Capacity(0)
	if ml == 0 {
		return layers.Hardware{}, 0, fmt.Errorf("%w: %s cannot hold one layer of %s (%.1f GB a layer)",
			ErrScenario, gpu, m.Name, m.LayerWeightBytes()/1e9)
	}
	return h, ml, nil
}
