package consensus

import (
	"testing"

	"github.com/stratanet/strata/layers"
)

// TestDecideWarmup drives the member's warmup policy through a swarm's
// life, built with the leader scripts' world: a first map, a proposal
// that moves a node, a replacement while it loads, and the commit.
func TestDecideWarmup(t *testing.T) {
	w := newWorld(t)
	for _, cmd := range []string{"self a", "join a b c", "servers a b c"} {
		if out := w.do(cmd); out != "" {
			t.Fatalf("%s: %s", cmd, out)
		}
	}
	var none Load
	if got := DecideWarmup("a", w.in.State, none, none); got != (WarmupStep{}) {
		t.Fatalf("no map: %+v", got)
	}
	w.do("run") // proposes the first map
	p, ok := w.in.State.Pending()
	if !ok {
		t.Fatal("no first map proposed")
	}
	rangeOf := func(m layers.LayerMap, id string) layers.Range { r, _ := m.Range(id); return r }
	wantA := Load{Epoch: 1, Range: rangeOf(p.Map, "a")}

	if got := DecideWarmup("a", w.in.State, none, none); got != (WarmupStep{Start: wantA}) {
		t.Errorf("pending map: %+v, want start %+v", got, wantA)
	}
	if got := DecideWarmup("a", w.in.State, wantA, none); got != (WarmupStep{}) {
		t.Errorf("already loading: %+v", got)
	}
	// A load of a range the pending map no longer asks for is cancelled
	// and the right one started.
	stale := Load{Epoch: 1, Range: layers.Range{Start: 0, End: 1}}
	if got := DecideWarmup("a", w.in.State, stale, none); got != (WarmupStep{Cancel: true, Start: wantA}) {
		t.Errorf("stale load: %+v", got)
	}
	// A node that reported ready loads nothing more.
	w.do("ready a")
	if got := DecideWarmup("a", w.in.State, wantA, none); got != (WarmupStep{Cancel: true}) {
		t.Errorf("ready: %+v", got)
	}
	// Commit: every node releases what it does not serve, once.
	w.do("ready all")
	w.do("run")
	c := w.in.State.Committed()
	if c.Layers == 0 {
		t.Fatal("first map not committed")
	}
	rel := Load{Epoch: c.Epoch, Range: rangeOf(c, "b")}
	if got := DecideWarmup("b", w.in.State, none, none); got != (WarmupStep{Release: rel}) {
		t.Errorf("committed: %+v, want release %+v", got, rel)
	}
	if got := DecideWarmup("b", w.in.State, none, rel); got != (WarmupStep{}) {
		t.Errorf("released already: %+v", got)
	}
	// A node the committed map does not place releases everything.
	w.do("join d")
	if got := DecideWarmup("d", w.in.State, none, none); got != (WarmupStep{Release: Load{Epoch: c.Epoch}}) {
		t.Errorf("unplaced member: %+v", got)
	}
	// While a map is pending nothing is released.
	w.do("run")
	if _, ok := w.in.State.Pending(); !ok {
		t.Fatal("no proposal for d")
	}
	if got := DecideWarmup("b", w.in.State, none, none); got.Release != (Load{}) {
		t.Errorf("released during a warmup: %+v", got)
	}
}
