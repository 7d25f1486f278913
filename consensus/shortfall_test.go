package consensus

import (
	"testing"

	"github.com/stratanet/strata/layers"
)

// TestShortfall: the members a plan may place decide whether a swarm can
// hold every layer: a draining member and a dead one count for
// none; capped members that add up to the model do not fall short.
func TestShortfall(t *testing.T) {
	m, err := layers.NewModelSpec(layers.HyperParams{Name: "toy", Layers: 5, Hidden: 256, Heads: 4, KVHeads: 2, FFN: 640,
		Vocab: 512, BytesPerParam: 2})
	if err != nil {
		t.Fatal(err)
	}
	caps := testCaps(t)
	caps.MaxLayers = 3
	var s State
	s = mustApply(t, s, rec(0, NodeJoined{Node: "a", Caps: caps, Fingerprint: "fp"}))
	sf, err := Shortfall(s, m, layers.DefaultCostParams(), t0, nil)
	if err != nil || !sf.Short() || sf.Gap != (layers.Range{Start: 3, End: 5}) || len(sf.Caps) != 1 {
		t.Fatalf("one member of 3 layers: %+v, %v", sf, err)
	}
	caps.MaxLayers = 2
	s = mustApply(t, s, rec(1, NodeJoined{Node: "b", Caps: caps, Fingerprint: "fp"}))
	if sf, err := Shortfall(s, m, layers.DefaultCostParams(), t0, nil); err != nil || sf.Short() {
		t.Fatalf("3 + 2 of 5 layers: %+v, %v", sf, err)
	}
	dead := func(id string) bool { return id == "b" }
	if sf, _ := Shortfall(s, m, layers.DefaultCostParams(), t0, dead); sf.Gap != (layers.Range{Start: 3, End: 5}) {
		t.Fatalf("b dead: %+v", sf)
	}
	s = mustApply(t, s, rec(2, NodeDraining{Node: "b"}))
	if sf, _ := Shortfall(s, m, layers.DefaultCostParams(), t0, nil); sf.Gap != (layers.Range{Start: 3, End: 5}) || len(sf.Caps) != 1 {
		t.Fatalf("b draining: %+v", sf)
	}
}
