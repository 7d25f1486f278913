// Package scenario reads planning scenarios (a model, a node set, optional
// regions with RTTs) and scores every placement policy on them with the
// same measures. It parses bytes and never touches files, the network or
// clocks itself: the caller passes the bytes in and a clock for timings.
package scenario

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/stratanet/strata/layers"
)

// ErrScenario reports a scenario that does not parse or validate.
var ErrScenario = errors.New("scenario")

// File is a scenario as written in YAML.
type File struct {
	Name        string             `yaml:"name"`
	Description string             `yaml:"description"`
	Model       ModelRef           `yaml:"model"`
	Cost        *layers.CostParams `yaml:"cost"`
	Replication int                `yaml:"replication"`
	// LatencyTargetMS is a per-token latency target for our planner.
	LatencyTargetMS float64 `yaml:"latency_target_ms"`
	// RTTms gives round trips between regions in milliseconds; one
	// direction is enough. A region's RTT to itself defaults to 1 ms.
	RTTms map[string]map[string]float64 `yaml:"rtt_ms"`
	Nodes []NodeGroup                   `yaml:"nodes"`
}

// ModelRef is a built-in model name or raw hyper-parameters.
type ModelRef struct {
	Builtin string
	Hyper   *HyperYAML
	line    int
}

// HyperYAML are raw hyper-parameters in a scenario.
type HyperYAML struct {
	Name          string  `yaml:"name"`
	Layers        int     `yaml:"layers"`
	Hidden        int     `yaml:"hidden"`
	Heads         int     `yaml:"heads"`
	KVHeads       int     `yaml:"kv_heads"`
	FFN           int     `yaml:"ffn"`
	Vocab         int     `yaml:"vocab"`
	Experts       int     `yaml:"experts"`
	ActiveExperts int     `yaml:"active_experts"`
	BytesPerParam float64 `yaml:"bytes_per_param"`
	// Mixture-of-experts and latent-attention shape (layers.HyperParams).
	HeadDim       int `yaml:"head_dim"`
	ExpertFFN     int `yaml:"expert_ffn"`
	SharedExperts int `yaml:"shared_experts"`
	DenseLayers   int `yaml:"dense_layers"`
	KVLoRARank    int `yaml:"kv_lora_rank"`
	QLoRARank     int `yaml:"q_lora_rank"`
	RopeHeadDim   int `yaml:"rope_head_dim"`
	VHeadDim      int `yaml:"v_head_dim"`
}

// UnmarshalYAML accepts a name or a mapping.
func (m *ModelRef) UnmarshalYAML(v *yaml.Node) error {
	m.line = v.Line
	if v.Kind == yaml.ScalarNode {
		return v.Decode(&m.Builtin)
	}
	m.Hyper = &HyperYAML{}
	return decodeStrict(v, m.Hyper)
}

// NodeGroup is Count nodes of one kind.
type NodeGroup struct {
	// ID names the node (Count 1) or prefixes the IDs (id-000, ...);
	// default: the device name.
	ID     string `yaml:"id"`
	Device string `yaml:"device"`
	Count  int    `yaml:"count"`
	Region string `yaml:"region"`
	// Declared figures, for a device outside the table or to override it.
	MemoryGiB       float64 `yaml:"memory_gib"`
	MemBandwidthGBs float64 `yaml:"mem_bandwidth_gbs"`
	TFLOPS          float64 `yaml:"tflops"`
	NetGbit         float64 `yaml:"net_gbit"`
	MaxLayers       int     `yaml:"max_layers"`
	Speed           float64 `yaml:"speed"`
	line            int
}

// UnmarshalYAML records the group's line for error messages.
func (g *NodeGroup) UnmarshalYAML(v *yaml.Node) error {
	type plain NodeGroup
	var p plain
	if err := decodeStrict(v, &p); err != nil {
		return err
	}
	*g = NodeGroup(p)
	g.line = v.Line
	return nil
}

// decodeStrict decodes v rejecting unknown fields (Node.Decode does not).
func decodeStrict(v *yaml.Node, out any) error {
	b, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	d := yaml.NewDecoder(bytes.NewReader(b))
	d.KnownFields(true)
	if err := d.Decode(out); err != nil {
		// Lines are relative to the fragment: shift them to the file's.
		return shiftLines(err, v.Line-1)
	}
	return nil
}

func shiftLines(err error, by int) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) || by == 0 {
		return err
	}
	out := &yaml.TypeError{}
	for _, e := range te.Errors {
		var n int
		var rest string
		if _, scanErr := fmt.Sscanf(e, "line %d:", &n); scanErr == nil {
			_, rest, _ = strings.Cut(e, ":")
			e = fmt.Sprintf("line %d:%s", n+by, rest)
		}
		out.Errors = append(out.Errors, e)
	}
	return out
}

// Scenario is a parsed, validated scenario ready to plan.
type Scenario struct {
	File   File
	Source string // file name, for messages
	Model  layers.ModelSpec
	Nodes  []layers.Node
	Params layers.CostParams
	RTT    layers.RTT // nil without regions
}

// Parse reads a scenario. Errors name the source, the line and the field.
func Parse(source string, data []byte) (*Scenario, error) {
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %s: %s", ErrScenario, source, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	return build(source, f)
}

func build(source string, f File) (*Scenario, error) {
	bad := func(line int, field, format string, args ...any) error {
		return fmt.Errorf("%w: %s:%d: field %s: %s", ErrScenario, source, line, field, fmt.Sprintf(format, args...))
	}
	sc := &Scenario{File: f, Source: source, Params: layers.DefaultCostParams()}
	var err error
	switch {
	case f.Model.Hyper != nil:
		h := f.Model.Hyper
		sc.Model, err = layers.NewModelSpec(layers.HyperParams{Name: h.Name, Layers: h.Layers, Hidden: h.Hidden,
			Heads: h.Heads, KVHeads: h.KVHeads, FFN: h.FFN, Vocab: h.Vocab, Experts: h.Experts,
			ActiveExperts: h.ActiveExperts, BytesPerParam: h.BytesPerParam, HeadDim: h.HeadDim,
			ExpertFFN: h.ExpertFFN, SharedExperts: h.SharedExperts, DenseLayers: h.DenseLayers,
			KVLoRARank: h.KVLoRARank, QLoRARank: h.QLoRARank, RopeHeadDim: h.RopeHeadDim, VHeadDim: h.VHeadDim})
	case f.Model.Builtin != "":
		sc.Model, err = layers.Model(f.Model.Builtin)
	default:
		return nil, bad(1, "model", "missing")
	}
	if err != nil {
		return nil, bad(f.Model.line, "model", "%v", err)
	}
	if f.Cost != nil {
		c := *f.Cost
		if c.Context < 0 || c.MemoryReserve < 0 || c.MemoryReserve >= 1 || math.IsNaN(c.MemoryReserve) {
			return nil, bad(1, "cost", "context must be >= 0 and memory_reserve in [0,1)")
		}
		if c.Context > 0 {
			sc.Params.Context = c.Context
		}
		if c.MemoryReserve > 0 {
			sc.Params.MemoryReserve = c.MemoryReserve
		}
		if c.MaxBatch != 0 {
			sc.Params.MaxBatch = c.MaxBatch
		}
	}
	if f.Replication < 0 {
		return nil, bad(1, "replication", "must be >= 0")
	}
	if len(f.Nodes) == 0 {
		return nil, bad(1, "nodes", "no nodes")
	}
	seen := map[string]bool{}
	for gi, g := range f.Nodes {
		field := func(name string) string { return fmt.Sprintf("nodes[%d].%s", gi, name) }
		count := g.Count
		if count == 0 {
			count = 1
		}
		if count < 0 || count > 100000 {
			return nil, bad(g.line, field("count"), "%d out of range", g.Count)
		}
		var hw layers.Hardware
		if g.Device != "" {
			hw, err = layers.Device(g.Device)
			if err != nil && (g.MemoryGiB == 0 || g.MemBandwidthGBs == 0 || g.TFLOPS == 0) {
				return nil, bad(g.line, field("device"), "%v", err)
			}
			hw.Name = g.Device
		} else if g.MemoryGiB == 0 || g.MemBandwidthGBs == 0 || g.TFLOPS == 0 {
			return nil, bad(g.line, field("device"), "missing: name a device or declare memory_gib, mem_bandwidth_gbs and tflops")
		}
		if hw.Name == "" {
			// A declared device is named by its group, so that reports
			// (per-kind needs) can tell it apart.
			hw.Name = g.ID
			if hw.Name == "" {
				hw.Name = fmt.Sprintf("group%d", gi)
			}
		}
		if g.MemoryGiB != 0 {
			hw.MemoryBytes = g.MemoryGiB * layers.GiB
		}
		if g.MemBandwidthGBs != 0 {
			hw.MemBandwidth = g.MemBandwidthGBs * layers.GB
		}
		if g.TFLOPS != 0 {
			hw.TFLOPS = g.TFLOPS
		}
		hw.NetBandwidth = g.NetGbit * layers.Gbit
		if err := hw.Validate(); err != nil {
			return nil, bad(g.line, field("device"), "%v", err)
		}
		if g.MaxLayers < 0 {
			return nil, bad(g.line, field("max_layers"), "must be >= 0")
		}
		if g.Speed < 0 || math.IsNaN(g.Speed) || math.IsInf(g.Speed, 0) {
			return nil, bad(g.line, field("speed"), "must be > 0")
		}
		if g.Region != "" && f.RTTms != nil && !hasRegion(f.RTTms, g.Region) {
			return nil, bad(g.line, field("region"), "%q has no entry in rtt_ms", g.Region)
		}
		prefix := g.ID
		if prefix == "" {
			prefix = g.Device
			if prefix == "" {
				prefix = fmt.Sprintf("group%d", gi)
			}
		}
		for i := range count {
			id := prefix
			if count > 1 || g.ID == "" {
				id = fmt.Sprintf("%s-%03d", prefix, i)
			}
			if seen[id] {
				return nil, bad(g.line, field("id"), "node id %q repeats", id)
			}
			seen[id] = true
			sc.Nodes = append(sc.Nodes, layers.Node{ID: id, Hardware: hw, Region: g.Region,
				MaxLayers: g.MaxLayers, Speed: g.Speed})
		}
	}
	if f.RTTms != nil {
		rtt, err := regionRTT(f.RTTms, sc.Nodes)
		if err != nil {
			return nil, bad(1, "rtt_ms", "%v", err)
		}
		sc.RTT = rtt
	}
	return sc, nil
}

func hasRegion(m map[string]map[string]float64, r string) bool {
	if _, ok := m[r]; ok {
		return true
	}
	for _, row := range m {
		if _, ok := row[r]; ok {
			return true
		}
	}
	return false
}

// regionRTT turns a region matrix into a node RTT function (seconds).
func regionRTT(m map[string]map[string]float64, nodes []layers.Node) (layers.RTT, error) {
	regionOf := make(map[string]string, len(nodes))
	regions := map[string]bool{}
	for _, n := range nodes {
		regionOf[n.ID] = n.Region
		regions[n.Region] = true
	}
	lookup := func(a, b string) (float64, bool) {
		if v, ok := m[a][b]; ok {
			return v, true
		}
		if v, ok := m[b][a]; ok {
			return v, true
		}
		if a == b {
			return 1, true
		}
		return 0, false
	}
	names := make([]string, 0, len(regions))
	for r := range regions {
		names = append(names, r)
	}
	sort.Strings(names)
	table := map[[2]string]float64{}
	for _, a := range names {
		for _, b := range names {
			v, ok := lookup(a, b)
			if !ok {
				return nil, fmt.Errorf("no RTT between %q and %q", a, b)
			}
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("bad RTT %v between %q and %q", v, a, b)
			}
			table[[2]string{a, b}] = v / 1000
		}
	}
	return func(a, b string) float64 { return table[[2]string{regionOf[a], regionOf[b]}] }, nil
}

// Fleet profiles the scenario's nodes.
func (s *Scenario) Fleet() (*layers.Fleet, error) {
	return layers.NewFleet(s.Model, s.Nodes, s.Params)
}
