package layers

import (
	"encoding/json"
	"testing"
)

// TestShortfall: a fleet whose caps add up to fewer layers than the
// model's falls short by the rest, from the last layer a fill from layer
// 0 reaches; one whose caps add up to the model does not, and the planner
// covers it; a node whose memory holds no layer counts for none.
func TestShortfall(t *testing.T) {
	m := smallModel(t, 5)
	dev := Hardware{Name: "dev", MemoryBytes: 8 * GiB, MemBandwidth: 500 * GB, TFLOPS: 50}
	one := mustFleet(t, m, []Node{{ID: "a", Hardware: dev, MaxLayers: 3}})
	s := one.Shortfall()
	if !s.Short() || s.Gap != (Range{3, 5}) || len(s.Caps) != 1 || s.Caps[0] != 3 || s.Layers != 5 {
		t.Fatalf("one node of 3: %+v", s)
	}
	if _, err := NewPlanner().Full(one, 1); err == nil {
		t.Fatal("the planner covered a fleet that falls short")
	}
	two := mustFleet(t, m, []Node{{ID: "a", Hardware: dev, MaxLayers: 3}, {ID: "b", Hardware: dev, MaxLayers: 2}})
	if s := two.Shortfall(); s.Short() || !s.Gap.Empty() {
		t.Fatalf("3 + 2 of 5 layers: %+v", s)
	}
	if p, err := NewPlanner().Full(two, 1); err != nil || !p.Map.Covers() {
		t.Fatalf("the planner did not cover a fleet that does not fall short: %v", err)
	}
	tiny := Hardware{Name: "tiny", MemoryBytes: 64 << 10, MemBandwidth: 500 * GB, TFLOPS: 50}
	s = mustFleet(t, m, []Node{{ID: "a", Hardware: tiny}}).Shortfall()
	if s.Gap != (Range{0, 5}) || s.Caps[0] != 0 || !(s.LayerBytes > s.MaxMemory) || s.MaxMemory <= 0 {
		t.Fatalf("a node that holds no layer: %+v", s)
	}
}

// TestZeroMapJSON: the zero map (no map yet) round-trips through JSON;
// a map with layers still must be valid.
func TestZeroMapJSON(t *testing.T) {
	b, err := json.Marshal(LayerMap{})
	if err != nil {
		t.Fatal(err)
	}
	m := LayerMap{Epoch: 3, Layers: 4}
	if err := json.Unmarshal(b, &m); err != nil || m.Layers != 0 || m.Epoch != 0 || len(m.Stages) != 0 {
		t.Fatalf("%s: %+v, %v", b, m, err)
	}
	if err := json.Unmarshal([]byte(`{"epoch":2,"layers":0,"stages":[]}`), &m); err == nil {
		t.Fatal("a map of epoch 2 with no layers decoded")
	}
}
