package node

import (
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/stratanet/strata/routing"
)

// The plugin timer reads the node's clock and files each observation in
// the first bucket that holds it, cumulatively, one histogram per plugin.
func TestPluginTimer(t *testing.T) {
	clk := clockwork.NewFakeClock()
	pt := newPluginTimer(clk)
	m0 := pt.Mark()
	clk.Advance(3 * time.Millisecond)
	if d := pt.Mark() - m0; d != 3*time.Millisecond {
		t.Fatalf("Mark moved %v on a 3ms advance", d)
	}
	lat := routing.PluginCall{Profile: "p", Plugin: "latency", Kind: routing.KindScorer}
	live := routing.PluginCall{Profile: "p", Plugin: "live", Kind: routing.KindFilter}
	pt.Observe(lat, 3*time.Microsecond) // ≤ 5e-6
	pt.Observe(lat, 2*time.Millisecond) // ≤ 5e-3
	pt.Observe(lat, time.Second)        // +Inf only
	pt.Observe(live, 0)                 // ≤ 1e-6
	hs := pt.snapshot()
	if len(hs) != 2 || hs[0].PluginCall != live || hs[1].PluginCall != lat {
		t.Fatalf("histograms %+v, want live (filter) then latency (scorer)", hs)
	}
	h := hs[1]
	at := func(bound float64) uint64 {
		for i, b := range h.Bounds {
			if b == bound {
				return h.Counts[i]
			}
		}
		t.Fatalf("no bound %v in %v", bound, h.Bounds)
		return 0
	}
	if h.Count != 3 || h.Sum != time.Second+2*time.Millisecond+3*time.Microsecond {
		t.Fatalf("count %d sum %v", h.Count, h.Sum)
	}
	if at(1e-6) != 0 || at(5e-6) != 1 || at(1e-3) != 1 || at(5e-3) != 2 || at(0.1) != 2 {
		t.Fatalf("cumulative counts %v over %v", h.Counts, h.Bounds)
	}
	if hs[0].Count != 1 || hs[0].Counts[0] != 1 {
		t.Fatalf("live filter: %+v", hs[0])
	}
}
