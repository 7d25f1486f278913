package node

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/node/stage/sched"
)

// A span is one engine stage over layers [lo, hi): one layer of the
// pure-Go engine, or the whole range a node with another engine loads
// (node/model.go openRange). A hop over part of a span runs through a
// view of it (subStage), on the same weights.
type span struct {
	st     engine.Stage
	info   engine.Info
	lo, hi int
	refs   int // sessions on it or its views
	layers int // slots that point at it
	views  map[[2]int]engine.Stage
}

// subStage is a stage that can run part of its range on its own weights
// (engine/ggml's Stage.Sub).
type subStage interface {
	Sub(lo, hi int) (engine.Stage, error)
}

func newSpan(st engine.Stage) *span {
	in := st.Info()
	return &span{st: st, info: in, lo: in.Lo, hi: in.Hi}
}

// kvPerLayer is the KV bytes per position of one of the span's layers.
func (sp *span) kvPerLayer() int64 { return sp.info.KVBytesPerToken / int64(sp.hi-sp.lo) }

// stage is the stage that runs [lo, hi) of the span: itself, or a view.
func (sp *span) stage(lo, hi int) (engine.Stage, error) {
	if lo == sp.lo && hi == sp.hi {
		return sp.st, nil
	}
	if v := sp.views[[2]int{lo, hi}]; v != nil {
		return v, nil
	}
	ss, ok := sp.st.(subStage)
	if !ok {
		return nil, fmt.Errorf("%w: the stage over [%d, %d) cannot run [%d, %d) alone", engine.ErrRange, sp.lo, sp.hi, lo, hi)
	}
	v, err := ss.Sub(lo, hi)
	if err != nil {
		return nil, err
	}
	if sp.views == nil {
		sp.views = map[[2]int]engine.Stage{}
	}
	sp.views[[2]int{lo, hi}] = v
	return v, nil
}

// close closes the views, then the stage.
func (sp *span) close() {
	for _, v := range sp.views {
		v.Close()
	}
	sp.views = nil
	sp.st.Close()
}

type layerSlot struct {
	sp        *span
	releasing bool
}

// seg is the part of a hop that one stage runs: layers [lo, hi) of span sp.
type seg struct {
	sp     *span
	st     engine.Stage
	lo, hi int
}

// stageTable is what the scheduler has loaded: the stage that serves
// each layer, every open stage (replaced ones that sessions still use
// included), and the layers being released. It owns the stages' lives:
// a stage closes once it serves no layer and no session holds it. It
// knows nothing of sessions, KV admission or the prefix cache, and is
// used only from the scheduler's loop.
type stageTable struct {
	slots []*layerSlot
	spans map[*span]struct{}
	log   *zap.Logger
}

func newStageTable(layers int, log *zap.Logger) *stageTable {
	return &stageTable{slots: make([]*layerSlot, layers), spans: map[*span]struct{}{}, log: log}
}

// keepHeld takes back a one-layer stage for a layer already served by a
// one-layer stage: the one in place stays (sessions use it), sp closes,
// and a release of the layer is called off. It reports whether it did.
func (t *stageTable) keepHeld(sp *span) bool {
	sl := t.slots[sp.lo]
	if sl == nil || sp.hi-sp.lo != 1 || sl.sp.hi-sl.sp.lo != 1 {
		return false
	}
	sl.releasing = false
	sp.close()
	return true
}

// take has sp serve its layers, in place of what served them; sessions
// on the old stages finish there.
func (t *stageTable) take(sp *span) {
	t.spans[sp] = struct{}{}
	for l := sp.lo; l < sp.hi; l++ {
		if old := t.slots[l]; old != nil {
			old.sp.layers--
			t.maybeClose(old.sp)
		}
		t.slots[l] = &layerSlot{sp: sp}
		sp.layers++
	}
}

// mark marks every held layer outside keep for release (and calls off
// the release of those inside); freeReleased lets them go.
func (t *stageTable) mark(keep layers.Range) {
	for l, sl := range t.slots {
		if sl != nil {
			sl.releasing = !keep.Contains(l)
		}
	}
}

// releasing reports whether layer l is loaded and marked for release.
func (t *stageTable) releasing(l int) bool { return t.slots[l] != nil && t.slots[l].releasing }

// freeReleased lets every released layer that no session uses go.
func (t *stageTable) freeReleased() {
	for l := range t.slots {
		t.free(l)
	}
}

// free lets a released layer go once no session uses its stage; the
// stage closes when it serves no layer and no session.
func (t *stageTable) free(l int) {
	if sl := t.slots[l]; sl != nil && sched.Unload(sl.releasing, sl.sp.refs) {
		t.slots[l] = nil
		sl.sp.layers--
		t.log.Info("layer released", zap.Int("layer", l))
		t.maybeClose(sl.sp)
	}
}

// maybeClose closes sp once it serves no layer and no session holds
// it, once: unref reaches it both through free and directly.
func (t *stageTable) maybeClose(sp *span) {
	if _, open := t.spans[sp]; open && sp.layers == 0 && sp.refs == 0 {
		sp.close()
		delete(t.spans, sp)
	}
}

// unref drops a session's hold on sp, and what that leaves unused.
func (t *stageTable) unref(sp *span) {
	sp.refs--
	for l := sp.lo; l < sp.hi; l++ {
		if sl := t.slots[l]; sl != nil && sl.sp == sp {
			t.free(l)
		}
	}
	t.maybeClose(sp)
}

// segs are the stages that run layers [from, to), which must all be
// held, in order; each holds one more session until unref.
func (t *stageTable) segs(from, to int) ([]seg, error) {
	var segs []seg
	for l := from; l < to; {
		sp := t.slots[l].sp
		g := seg{sp: sp, lo: l, hi: min(sp.hi, to)}
		var err error
		if g.st, err = sp.stage(g.lo, g.hi); err != nil {
			for _, o := range segs {
				t.unref(o.sp)
			}
			return nil, fmt.Errorf("%w (at layers [%d, %d))", err, g.lo, g.hi)
		}
		segs = append(segs, g)
		sp.refs++
		l = g.hi
	}
	return segs, nil
}

// serves reports whether g's stage still serves its layers, not being
// released: a session over it may go to the prefix cache.
func (t *stageTable) serves(g seg) bool {
	sl := t.slots[g.lo]
	return sl != nil && !sl.releasing && sl.sp == g.sp
}

func (t *stageTable) weightBytes() int64 {
	var w int64
	for sp := range t.spans {
		w += sp.info.WeightBytes
	}
	return w
}

// need is the KV bytes a session of capacity positions takes on layers
// [h.From, h.To), and whether they are all held.
func (t *stageTable) need(h Hop, capacity int) (int64, bool) {
	if h.To > len(t.slots) {
		return 0, false
	}
	var per int64
	for l := h.From; l < h.To; l++ {
		sl := t.slots[l]
		if sl == nil || sl.releasing {
			return 0, false
		}
		per += sl.sp.kvPerLayer()
	}
	return per * int64(capacity), true
}

// held is, per layer, whether it is loaded and not being released.
func (t *stageTable) held() []bool {
	h := make([]bool, len(t.slots))
	for l, sl := range t.slots {
		h[l] = sl != nil && !sl.releasing
	}
	return h
}

// summary fills st's Loaded and Spans (st.Held set), and returns the KV
// bytes per position over the held layers.
func (t *stageTable) summary(st *schedStatus) (per int64) {
	for l, sl := range t.slots {
		if sl == nil {
			continue
		}
		st.Loaded++
		if !st.Held[l] {
			continue
		}
		per += sl.sp.kvPerLayer()
		if n := len(st.Spans); n > 0 && st.Spans[n-1].End == l && t.slots[l-1].sp == sl.sp {
			st.Spans[n-1].End++
		} else {
			st.Spans = append(st.Spans, layers.Range{Start: l, End: l + 1})
		}
	}
	return per
}

// close closes every stage.
func (t *stageTable) close() {
	for sp := range t.spans {
		sp.close()
	}
	t.spans = nil
	clear(t.slots)
}
