package layers

import (
	"fmt"
	"math"
)

// Node is one member as the planner sees it.
type Node struct {
	ID       string   `yaml:"id" json:"id"`
	Hardware Hardware `yaml:"hardware" json:"hardware"`
	Region   string   `yaml:"region,omitempty" json:"region,omitempty"`
	// MaxLayers caps what the node offers (0: no cap beyond memory).
	MaxLayers int `yaml:"max_layers,omitempty" json:"max_layers,omitempty"`
	// Speed scales the cost model's throughput by what was measured
	// (1 or 0: as modelled).
	Speed float64 `yaml:"speed,omitempty" json:"speed,omitempty"`
}

// CostParams are the workload assumptions of the cost model.
type CostParams struct {
	// Context is the KV cache each session reserves, in tokens.
	Context int `yaml:"context" json:"context"`
	// MemoryReserve is the fraction of device memory left to the runtime.
	MemoryReserve float64 `yaml:"memory_reserve" json:"memory_reserve"`
	// MaxBatch caps a node's decode batch (0: the default; negative: only
	// memory caps it).
	MaxBatch int `yaml:"max_batch,omitempty" json:"max_batch,omitempty"`
	// SessionTokens is the workload's mean tokens per session, prompt plus
	// output (0: off). When set, a node's rate is also capped by what its
	// KV memory holds: the sessions of that length that fit beside its
	// layers (at most MaxBatch), each giving one token per the time a path
	// of the whole model at this node's per-layer time takes. A stage keeps
	// a session's cache for the path's whole time per token, not only for
	// its own step, so the compute rate alone overstates what memory-bound
	// and slow stages serve. DefaultSessionTokens is a sensible value for a
	// caller that has seen no traffic.
	SessionTokens int `yaml:"session_tokens,omitempty" json:"session_tokens,omitempty"`
}

// DefaultSessionTokens is a ~760-token prompt and a ~230-token answer: the
// means of the Azure conversation trace that Helix evaluates on.
const DefaultSessionTokens = 1000

// DefaultCostParams is a 2,048-token context, 10% of memory kept back and
// at most 256 sequences in a batch (vLLM's default max_num_seqs): beyond
// that a real server's scheduler, not memory, is the limit.
func DefaultCostParams() CostParams {
	return CostParams{Context: 2048, MemoryReserve: 0.1, MaxBatch: 256}
}

func (p CostParams) withDefaults() CostParams {
	d := DefaultCostParams()
	if p.Context <= 0 {
		p.Context = d.Context
	}
	if !(p.MemoryReserve >= 0 && p.MemoryReserve < 1) {
		p.MemoryReserve = d.MemoryReserve
	}
	if p.MaxBatch == 0 {
		p.MaxBatch = d.MaxBatch
	}
	if p.MaxBatch < 0 { // negative: no cap beyond memory
		p.MaxBatch = 0
	}
	if p.SessionTokens < 0 {
		p.SessionTokens = 0
	}
	return p
}

// kvRate is the KV-bound rate of a node with k layers and free bytes left
// beside them (p.SessionTokens > 0): the sessions of the mean length that
// fit (at least one, at most MaxBatch), over the time per token of a path
// of m.Layers layers at this node's decode time for that batch.
func (p CostParams) kvRate(m ModelSpec, h Hardware, free float64, k int, speed float64) float64 {
	n := int(math.Floor(free / (float64(p.SessionTokens) * m.KVBytesPerToken() * float64(k))))
	if p.MaxBatch > 0 && n > p.MaxBatch {
		n = p.MaxBatch
	}
	n = max(n, 1)
	perToken := float64(m.Layers) * DecodeLayerTime(m, h, n, p.SessionTokens)
	return speed * float64(n) / perToken
}

// Ends says which ends of the model a stage holds: the first stage holds the
// token embedding, the last the output head.
type Ends uint8

// The ends a stage may hold.
const (
	EndEmbed Ends = 1 << iota
	EndHead
)

// EndsOf returns the ends that range r of an L-layer model holds.
func EndsOf(r Range, layers int) Ends {
	var e Ends
	if r.Start == 0 {
		e |= EndEmbed
	}
	if r.End == layers {
		e |= EndHead
	}
	return e
}

// bytes is the memory the embedding and head in e take for model m.
func (e Ends) bytes(m ModelSpec) float64 {
	b := 0.0
	if e&EndEmbed != 0 {
		b += m.EmbeddingBytes()
	}
	if e&EndHead != 0 {
		b += m.HeadBytes()
	}
	return b
}

// DecodeLayerTime is the time one decode step of batch b takes in one layer
// when each sequence holds ctx tokens of context: a roofline over the bytes
// read (weights once per step, each sequence's KV cache) and the FLOPs.
// A mixture of experts reads only the experts the batch touches
// (ModelSpec.LayerReadBytesBatch), so its step grows with b even when
// memory-bound.
func DecodeLayerTime(m ModelSpec, h Hardware, b, ctx int) float64 {
	if b < 1 {
		b = 1
	}
	bytes := m.LayerReadBytesBatch(b) + float64(b)*float64(ctx)*m.KVBytesPerToken()
	return math.Max(bytes/h.MemBandwidth, float64(b)*m.FLOPsPerToken(ctx)/h.FLOPS())
}

// PrefillLayerTime is the time a prompt of n tokens takes in one layer: the
// weights (of a mixture of experts, the experts its tokens touch) are read
// once, and the work is n tokens at half the prompt's length of context on
// average.
func PrefillLayerTime(m ModelSpec, h Hardware, n int) float64 {
	if n < 1 {
		n = 1
	}
	bytes := m.LayerReadBytesBatch(n) + float64(n)*m.KVBytesPerToken()
	return math.Max(bytes/h.MemBandwidth, float64(n)*m.FLOPsPerToken(n/2)/h.FLOPS())
}

// headTime is the time one decode step of batch b spends in the output head.
func headTime(m ModelSpec, h Hardware, b int) float64 {
	return math.Max(m.HeadBytes()/h.MemBandwidth, float64(b)*m.HeadFLOPsPerToken()/h.FLOPS())
}

// Profile is a node's throughput for every layer count it can hold,
// precomputed so that planners read it in O(1).
type Profile struct {
	Node Node
	// MaxLayers is the most layers the node can hold with room for one
	// sequence's KV cache, without either end.
	MaxLayers int
	tps       [4][]float64 // by Ends, then by layer count; tps[e][0] = 0
	batch     [4][]int
}

// NewProfile computes node n's throughput table for model m.
func NewProfile(m ModelSpec, n Node, p CostParams) Profile {
	p = p.withDefaults()
	pr := Profile{Node: n}
	h := n.Hardware
	if h.Validate() != nil {
		return pr
	}
	speed := n.Speed
	if !(speed > 0) || math.IsInf(speed, 0) {
		speed = 1
	}
	usable := h.MemoryBytes * (1 - p.MemoryReserve)
	seqBytes := float64(p.Context) * m.KVBytesPerToken() // per layer
	w := m.LayerWeightBytes()
	// A node that does not hold the whole model sends (or receives) one
	// activation per token over its link: full duplex, so the link caps the
	// node's rate at bandwidth ÷ activation bytes.
	linkTPS := math.Inf(1)
	if h.NetBandwidth > 0 {
		linkTPS = h.NetBandwidth / m.ActivationBytesPerToken()
	}
	kmax := int(math.Floor(usable / (w + seqBytes)))
	if kmax > m.Layers {
		kmax = m.Layers
	}
	if n.MaxLayers > 0 && kmax > n.MaxLayers {
		kmax = n.MaxLayers
	}
	if kmax < 0 {
		kmax = 0
	}
	pr.MaxLayers = kmax
	for e := Ends(0); e < 4; e++ {
		pr.tps[e] = make([]float64, kmax+1)
		pr.batch[e] = make([]int, kmax+1)
		free0 := usable - e.bytes(m)
		for k := 1; k <= kmax; k++ {
			free := free0 - float64(k)*w
			if free < seqBytes*float64(k) {
				break
			}
			b := int(math.Floor(free / (seqBytes * float64(k))))
			if p.MaxBatch > 0 && b > p.MaxBatch {
				b = p.MaxBatch
			}
			step := float64(k) * DecodeLayerTime(m, h, b, p.Context)
			if e&EndHead != 0 {
				step += headTime(m, h, b)
			}
			t := speed * float64(b) / step
			if p.SessionTokens > 0 {
				t = math.Min(t, p.kvRate(m, h, free, k, speed))
			}
			if !(k == m.Layers && e == EndEmbed|EndHead) {
				t = math.Min(t, linkTPS)
			}
			pr.tps[e][k] = t
			pr.batch[e][k] = b
		}
	}
	return pr
}

// TPS is the node's tokens/s when it holds k layers and the given ends, at
// the largest batch its remaining memory holds. Zero when it cannot.
func (p Profile) TPS(k int, e Ends) float64 {
	if k <= 0 || k > p.MaxLayers || e > 3 {
		return 0
	}
	return p.tps[e][k]
}

// Batch is the decode batch behind TPS(k, e).
func (p Profile) Batch(k int, e Ends) int {
	if k <= 0 || k > p.MaxLayers || e > 3 {
		return 0
	}
	return p.batch[e][k]
}

// Capacity is the most layers the node can hold with the given ends while
// keeping room for at least one sequence.
func (p Profile) Capacity(e Ends) int {
	k := p.MaxLayers
	for k > 0 && p.TPS(k, e) == 0 {
		k--
	}
	return k
}

// BestK is the layer count that maximises k·TPS(k): the node's most
// efficient size, ignoring ends.
func (p Profile) BestK() int {
	best, bk := 0.0, 0
	for k := 1; k <= p.MaxLayers; k++ {
		if v := float64(k) * p.TPS(k, 0); v >= best*(1-1e-9) && v > 0 {
			best, bk = v, k
		}
	}
	return bk
}

// Profiles computes the profiles of a node set, in the given order, and
// rejects unusable or duplicate nodes.
func Profiles(m ModelSpec, nodes []Node, p CostParams) ([]Profile, error) {
	out := make([]Profile, len(nodes))
	seen := make(map[string]bool, len(nodes))
	for i, n := range nodes {
		if n.ID == "" {
			return nil, fmt.Errorf("%w: node %d has no id", ErrBadSpec, i)
		}
		if seen[n.ID] {
			return nil, fmt.Errorf("%w: duplicate node id %q", ErrBadSpec, n.ID)
		}
		seen[n.ID] = true
		if err := n.Hardware.Validate(); err != nil {
			return nil, fmt.Errorf("node %q: %w", n.ID, err)
		}
		out[i] = NewProfile(m, n, p)
	}
	return out, nil
}
