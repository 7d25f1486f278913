package sim

import (
	"fmt"

	"github.com/stratanet/strata/layers"
)

// SyntheticModel is a model without Helix data: the small generated
// models the testnet (testnet/) serves on CPU, so that a scenario can be
// set beside a real testnet run. Its nodes are all alike; their layer
// time is linear in the batch.
type SyntheticModel struct {
	Layers int `yaml:"layers"`
	Dim    int `yaml:"dim"`
	// LayerMS is one layer's time for one decode token; PromptTokenMS one
	// layer's time per prompt token.
	LayerMS       float64 `yaml:"layer_ms"`
	PromptTokenMS float64 `yaml:"prompt_token_ms"`
	// MaxBatch caps a batch's sequences (node.DefaultMaxBatch if 0).
	MaxBatch int `yaml:"max_batch"`
}

// linearTimer is a layer time linear in the batch's tokens.
type linearTimer struct{ perDecode, perPrompt float64 }

func (t linearTimer) LayerTime(promptTokens, decodeTokens int) float64 {
	return t.perDecode*float64(decodeTokens) + t.perPrompt*float64(promptTokens)
}

func (m *SyntheticModel) validate() error {
	if m.Layers <= 0 || m.Dim <= 0 || m.LayerMS < 0 || m.PromptTokenMS < 0 || m.MaxBatch < 0 {
		return fmt.Errorf("%w: synthetic model %+v", ErrScenario, *m)
	}
	return nil
}

// spec is the planner's view of the model: the testnet's shape (4 heads,
// 2 KV heads, FFN 5/2 of dim, f32 weights).
func (m *SyntheticModel) spec() (layers.ModelSpec, error) {
	return layers.NewModelSpec(layers.HyperParams{Name: fmt.Sprintf("synthetic-%dx%d", m.Layers, m.Dim), Layers: m.Layers,
		Hidden: m.Dim, Heads: 4, KVHeads: 2, FFN: m.Dim * 5 / 2, Vocab: 4096, BytesPerParam: 4})
}

// wire: a token id and framing between the entry and a node; f32 hidden
// states between nodes.
func (m *SyntheticModel) wire() ModelWire {
	return ModelWire{Layers: m.Layers, TokenBytes: 64, ActivationBytes: 4 * float64(m.Dim)}
}

func (m *SyntheticModel) timer() LayerTimer {
	return linearTimer{perDecode: m.LayerMS / 1e3, perPrompt: m.PromptTokenMS / 1e3}
}

func (m *SyntheticModel) caps() Caps {
	b := m.MaxBatch
	if b == 0 {
		b = 64 // node.DefaultMaxBatch
	}
	return Caps{PromptMaxRequests: b, PromptMaxTokens: 1 << 30, DecodeMaxTokens: b, DecodeMaxContext: 1 << 30}
}

// cpuHardware is what the planner is told a testnet node is; all nodes
// are alike, so only the ratios between them matter.
var cpuHardware = layers.Hardware{Name: "cpu", MemoryBytes: 16 << 30, MemBandwidth: 20e9, TFLOPS: 0.5, NetBandwidth: 1e9}
