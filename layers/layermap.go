package layers

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
)

// ErrBadMap reports a layer map that breaks its invariants or does not decode.
var ErrBadMap = errors.New("layers: bad layer map")

// Limits on a decoded map, so that a forged one cannot exhaust memory.
const (
	MaxMapLayers = 1 << 16
	MaxMapStages = 1 << 20
	MaxNodeIDLen = 256
)

// Range is the contiguous layer range [Start, End).
type Range struct {
	Start int `json:"start" yaml:"start"`
	End   int `json:"end" yaml:"end"`
}

// Len is the number of layers in r.
func (r Range) Len() int { return r.End - r.Start }

// Contains reports whether layer l is in r.
func (r Range) Contains(l int) bool { return l >= r.Start && l < r.End }

// Empty reports whether r holds no layer.
func (r Range) Empty() bool { return r.End <= r.Start }

// Intersect returns the layers in both ranges (possibly empty).
func (r Range) Intersect(o Range) Range {
	s, e := max(r.Start, o.Start), min(r.End, o.End)
	if e < s {
		e = s
	}
	return Range{s, e}
}

func (r Range) String() string { return fmt.Sprintf("[%d,%d)", r.Start, r.End) }

// Stage is one node's place in a map.
type Stage struct {
	Node  string `json:"node" yaml:"node"`
	Range `yaml:",inline"`
}

// LayerMap says which node serves which contiguous range of layers. Ranges
// may overlap. Stages are kept sorted by node ID, so that equal maps encode
// to equal bytes. A LayerMap is a value: methods never change the receiver.
type LayerMap struct {
	Epoch  uint64  `json:"epoch"`
	Layers int     `json:"layers"`
	Stages []Stage `json:"stages"`
}

// NewLayerMap validates and sorts stages into a map.
func NewLayerMap(layers int, epoch uint64, stages ...Stage) (LayerMap, error) {
	m := LayerMap{Epoch: epoch, Layers: layers, Stages: append([]Stage(nil), stages...)}
	sort.Slice(m.Stages, func(i, j int) bool { return m.Stages[i].Node < m.Stages[j].Node })
	return m, m.Validate()
}

// Validate checks the map's invariants: ranges inside [0, Layers), nonempty,
// one stage per node, stages sorted.
func (m LayerMap) Validate() error {
	if m.Layers <= 0 || m.Layers > MaxMapLayers {
		return fmt.Errorf("%w: %d layers", ErrBadMap, m.Layers)
	}
	if len(m.Stages) > MaxMapStages {
		return fmt.Errorf("%w: %d stages", ErrBadMap, len(m.Stages))
	}
	for i, s := range m.Stages {
		if s.Node == "" || len(s.Node) > MaxNodeIDLen {
			return fmt.Errorf("%w: stage %d: bad node id", ErrBadMap, i)
		}
		if s.Start < 0 || s.End > m.Layers || s.Start >= s.End {
			return fmt.Errorf("%w: node %q: range %v outside [0,%d)", ErrBadMap, s.Node, s.Range, m.Layers)
		}
		if i > 0 && m.Stages[i-1].Node >= s.Node {
			if m.Stages[i-1].Node == s.Node {
				return fmt.Errorf("%w: node %q appears twice", ErrBadMap, s.Node)
			}
			return fmt.Errorf("%w: stages not sorted at %q", ErrBadMap, s.Node)
		}
	}
	return nil
}

func (m LayerMap) find(node string) (int, bool) {
	i := sort.Search(len(m.Stages), func(i int) bool { return m.Stages[i].Node >= node })
	return i, i < len(m.Stages) && m.Stages[i].Node == node
}

// Range returns the range node serves, if any.
func (m LayerMap) Range(node string) (Range, bool) {
	if i, ok := m.find(node); ok {
		return m.Stages[i].Range, true
	}
	return Range{}, false
}

// With returns a copy of m where node serves r (replacing any range it had).
func (m LayerMap) With(node string, r Range) LayerMap {
	out := m.clone()
	i, ok := out.find(node)
	if ok {
		out.Stages[i].Range = r
		return out
	}
	out.Stages = append(out.Stages, Stage{})
	copy(out.Stages[i+1:], out.Stages[i:])
	out.Stages[i] = Stage{Node: node, Range: r}
	return out
}

// Without returns a copy of m without node.
func (m LayerMap) Without(node string) LayerMap {
	out := m.clone()
	if i, ok := out.find(node); ok {
		out.Stages = append(out.Stages[:i], out.Stages[i+1:]...)
	}
	return out
}

func (m LayerMap) clone() LayerMap {
	m.Stages = append([]Stage(nil), m.Stages...)
	return m
}

// Coverage returns how many nodes serve each layer.
func (m LayerMap) Coverage() []int {
	c := make([]int, max(m.Layers, 0))
	diff := make([]int, len(c)+1)
	for _, s := range m.Stages {
		if s.Start < 0 || s.End > len(c) || s.Start >= s.End {
			continue
		}
		diff[s.Start]++
		diff[s.End]--
	}
	run := 0
	for l := range c {
		run += diff[l]
		c[l] = run
	}
	return c
}

// Replication is the least number of nodes serving any layer (0: a gap).
func (m LayerMap) Replication() int {
	c := m.Coverage()
	if len(c) == 0 {
		return 0
	}
	lo := c[0]
	for _, v := range c {
		lo = min(lo, v)
	}
	return lo
}

// Covers reports whether every layer in [0, Layers) has a node.
func (m LayerMap) Covers() bool { return m.Layers > 0 && m.Replication() > 0 }

// Gaps returns the maximal ranges no node serves.
func (m LayerMap) Gaps() []Range {
	var gaps []Range
	for l, v := range m.Coverage() {
		if v != 0 {
			continue
		}
		if n := len(gaps); n > 0 && gaps[n-1].End == l {
			gaps[n-1].End++
		} else {
			gaps = append(gaps, Range{l, l + 1})
		}
	}
	return gaps
}

// Nodes returns the IDs in the map, sorted.
func (m LayerMap) Nodes() []string {
	ids := make([]string, len(m.Stages))
	for i, s := range m.Stages {
		ids[i] = s.Node
	}
	return ids
}

// Equal reports whether two maps have the same epoch, layers and stages.
func (m LayerMap) Equal(o LayerMap) bool {
	if m.Epoch != o.Epoch || m.Layers != o.Layers || len(m.Stages) != len(o.Stages) {
		return false
	}
	for i := range m.Stages {
		if m.Stages[i] != o.Stages[i] {
			return false
		}
	}
	return true
}

// SameStages reports whether two maps place the same nodes on the same
// ranges, whatever their epochs.
func (m LayerMap) SameStages(o LayerMap) bool {
	o.Epoch = m.Epoch
	return m.Equal(o)
}

const mapMagic = "SLM1"

// MarshalBinary encodes the map deterministically: a magic, then uvarints
// for epoch, layers and stage count, then each stage as a length-prefixed
// node ID, start and end, in node order.
func (m LayerMap) MarshalBinary() ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	b := make([]byte, 0, 16+len(m.Stages)*64)
	b = append(b, mapMagic...)
	b = binary.AppendUvarint(b, m.Epoch)
	b = binary.AppendUvarint(b, uint64(m.Layers))
	b = binary.AppendUvarint(b, uint64(len(m.Stages)))
	for _, s := range m.Stages {
		b = binary.AppendUvarint(b, uint64(len(s.Node)))
		b = append(b, s.Node...)
		b = binary.AppendUvarint(b, uint64(s.Start))
		b = binary.AppendUvarint(b, uint64(s.End))
	}
	return b, nil
}

// UnmarshalBinary decodes what MarshalBinary wrote. It rejects trailing
// bytes, out-of-range fields and maps that break the invariants.
func (m *LayerMap) UnmarshalBinary(b []byte) error {
	if len(b) < len(mapMagic) || string(b[:len(mapMagic)]) != mapMagic {
		return fmt.Errorf("%w: bad magic", ErrBadMap)
	}
	b = b[len(mapMagic):]
	next := func(what string, limit uint64) (uint64, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, fmt.Errorf("%w: truncated %s", ErrBadMap, what)
		}
		if n != len(binary.AppendUvarint(nil, v)) { // one encoding per map
			return 0, fmt.Errorf("%w: non-canonical %s", ErrBadMap, what)
		}
		if v > limit {
			return 0, fmt.Errorf("%w: %s %d exceeds %d", ErrBadMap, what, v, limit)
		}
		b = b[n:]
		return v, nil
	}
	epoch, err := next("epoch", ^uint64(0))
	if err != nil {
		return err
	}
	layers, err := next("layers", MaxMapLayers)
	if err != nil {
		return err
	}
	count, err := next("stage count", MaxMapStages)
	if err != nil {
		return err
	}
	// Every stage takes at least 4 bytes: refuse counts the input cannot hold.
	if count > uint64(len(b))/4 {
		return fmt.Errorf("%w: stage count %d exceeds input", ErrBadMap, count)
	}
	out := LayerMap{Epoch: epoch, Layers: int(layers), Stages: make([]Stage, 0, count)}
	for i := uint64(0); i < count; i++ {
		n, err := next("node id length", MaxNodeIDLen)
		if err != nil {
			return err
		}
		if uint64(len(b)) < n {
			return fmt.Errorf("%w: truncated node id", ErrBadMap)
		}
		id := string(b[:n])
		b = b[n:]
		start, err := next("start", layers)
		if err != nil {
			return err
		}
		end, err := next("end", layers)
		if err != nil {
			return err
		}
		out.Stages = append(out.Stages, Stage{Node: id, Range: Range{int(start), int(end)}})
	}
	if len(b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrBadMap, len(b))
	}
	if err := out.Validate(); err != nil {
		return err
	}
	*m = out
	return nil
}

// UnmarshalJSON decodes and validates a map. The zero map (no layers,
// no stages, epoch 0: what a node with no map committed yet reports)
// decodes to the zero LayerMap, as it encodes.
func (m *LayerMap) UnmarshalJSON(b []byte) error {
	type plain LayerMap
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return fmt.Errorf("%w: %w", ErrBadMap, err)
	}
	if p.Layers == 0 && p.Epoch == 0 && len(p.Stages) == 0 {
		*m = LayerMap{}
		return nil
	}
	out, err := NewLayerMap(p.Layers, p.Epoch, p.Stages...)
	if err != nil {
		return err
	}
	*m = out
	return nil
}
