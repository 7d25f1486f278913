package node

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/layers"
)

// closeCounted is a simulated stage that counts its closes.
type closeCounted struct {
	engine.Stage
	closes int
}

func (c *closeCounted) Close() error { c.closes++; return c.Stage.Close() }

// TestStageTable: the table's stages live while a layer or a session
// needs them. A released layer stays while a session runs on it and goes
// with the session's end; a range stage takes its layers over from the
// one-layer stages, which close once unused; a second stage for a layer
// already held is closed at once and the first stays.
func TestStageTable(t *testing.T) {
	spec, err := layers.Model("llama-3-8b")
	if err != nil {
		t.Fatal(err)
	}
	hw, err := layers.Device("l40s")
	if err != nil {
		t.Fatal(err)
	}
	noSleep := engine.WithSimSleep(func(context.Context, time.Duration) error { return nil })
	open := func(lo, hi int) (*span, *closeCounted) {
		st, err := engine.NewSimStage(spec, hw, engine.WithRange(lo, hi), noSleep)
		if err != nil {
			t.Fatal(err)
		}
		c := &closeCounted{Stage: st}
		return newSpan(c), c
	}
	tab := newStageTable(4, zap.NewNop())
	var one [4]*closeCounted
	var w int64
	for l := range 4 {
		sp, c := open(l, l+1)
		tab.take(sp)
		one[l] = c
		w += sp.info.WeightBytes
	}
	if got := tab.weightBytes(); got != w || w <= 0 {
		t.Fatalf("weights %d, want %d", got, w)
	}
	dup, dupc := open(1, 2)
	if !tab.keepHeld(dup) || dupc.closes != 1 || tab.slots[1].sp.st != one[1] {
		t.Fatalf("a second stage for held layer 1: kept %v, closed %d times", tab.slots[1].sp.st == one[1], dupc.closes)
	}

	segs, err := tab.segs(0, 2)
	if err != nil || len(segs) != 2 {
		t.Fatalf("segs over [0, 2): %v, %v", segs, err)
	}
	per, ok := tab.need(Hop{From: 0, To: 2}, 10)
	if !ok || per != 10*(segs[0].sp.kvPerLayer()+segs[1].sp.kvPerLayer()) {
		t.Fatalf("need over [0, 2): %d, %v", per, ok)
	}
	tab.mark(layers.Range{Start: 2, End: 4})
	tab.freeReleased()
	if h := tab.held(); h[0] || h[1] || !h[2] || !h[3] {
		t.Fatalf("held after releasing [0, 2): %v", h)
	}
	if tab.slots[0] == nil || tab.slots[1] == nil || one[0].closes != 0 {
		t.Fatal("a released layer went while a session ran on it")
	}
	if _, ok := tab.need(Hop{From: 0, To: 2}, 10); ok {
		t.Fatal("a new session admitted to released layers")
	}
	for _, g := range segs {
		tab.unref(g.sp)
	}
	if tab.slots[0] != nil || tab.slots[1] != nil || one[0].closes != 1 || one[1].closes != 1 {
		t.Fatalf("after the session: slots %v %v, closes %d %d", tab.slots[0], tab.slots[1], one[0].closes, one[1].closes)
	}

	// A range stage over [2, 4) while a session holds layer 3's stage.
	segs, err = tab.segs(3, 4)
	if err != nil {
		t.Fatal(err)
	}
	rng, rc := open(2, 4)
	tab.take(rng)
	if one[2].closes != 1 || one[3].closes != 0 {
		t.Fatalf("after the range stage: closes %d (layer 2, unused), %d (layer 3, in use)", one[2].closes, one[3].closes)
	}
	tab.unref(segs[0].sp)
	if one[3].closes != 1 || rc.closes != 0 || tab.weightBytes() != rng.info.WeightBytes {
		t.Fatalf("after the last session on the old stage: closed %d, range stage closed %d, weights %d want %d",
			one[3].closes, rc.closes, tab.weightBytes(), rng.info.WeightBytes)
	}
	st := &schedStatus{Held: tab.held()}
	if perPos := tab.summary(st); st.Loaded != 2 || len(st.Spans) != 1 || st.Spans[0] != (layers.Range{Start: 2, End: 4}) || perPos != 2*rng.kvPerLayer() {
		t.Fatalf("summary: %d loaded, spans %v, %d KV bytes per position", st.Loaded, st.Spans, perPos)
	}
	tab.close()
	if rc.closes != 1 {
		t.Fatalf("range stage closed %d times on close", rc.closes)
	}
}
