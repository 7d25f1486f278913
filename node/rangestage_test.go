package node

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/layers"
)

// rangedGo loads a layer range as one stage, as ggml does (Engine.Ranges),
// on the pure-Go engine, which gives the same bits at any split: every
// path through range stages and their views has one right answer, a
// single-process run's. Sub opens the part from the same file.
type rangedGo struct {
	*engine.Local
	path string
	subs *atomic.Int32
}

func (g *rangedGo) Sub(lo, hi int) (engine.Stage, error) {
	g.subs.Add(1)
	return engine.Open(g.path, engine.WithRange(lo, hi), engine.WithThreads(1))
}

// rangedEngine counts the stages it opens over more than one layer.
func rangedEngine(ranges, subs *atomic.Int32) Engine {
	return Engine{Name: "ranged-go", Ranges: true, Open: func(path string, lo, hi, threads int) (engine.Stage, error) {
		st, err := engine.Open(path, engine.WithRange(lo, hi), engine.WithThreads(1))
		if err != nil {
			return nil, err
		}
		if hi-lo > 1 {
			ranges.Add(1)
		}
		return &rangedGo{Local: st, path: path, subs: subs}, nil
	}}
}

// TestRangeStageSwitch: schedulers whose layers are one range stage run
// hops over part of it through views, and give a single-process run's
// tokens. A new range stage loaded beside the old one takes its layers
// over: the session open on the old one goes on there to the same tokens,
// a new session runs on the new one, and the old one closes, its weights
// no longer counted, once its last session ends.
func TestRangeStageSwitch(t *testing.T) {
	m, err := openModel(testModel(t), "", layers.Hardware{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	var ranges, subs atomic.Int32
	eng := rangedEngine(&ranges, &subs)
	m.eng = &eng
	open := func(lo, hi int) *span {
		st, err := m.openRange(m.path, lo, hi)
		if err != nil {
			t.Fatal(err)
		}
		return newSpan(st)
	}
	c := &realChain{t: t}
	for i, cut := range [][2]int{{0, 3}, {3, 8}} {
		c.hops = append(c.hops, Hop{Peer: peer.ID(fmt.Sprintf("hop%d", i)), From: cut[0], To: cut[1]})
		out := &fakeOutbox{}
		s := newScheduler(schedConfig{self: c.hops[i].Peer, model: m.info, hash: m.hash, memBudget: 1 << 30, maxBatch: 8, maxQueue: 4,
			idleTimeout: time.Minute, queueTimeout: 10 * time.Second, prefixCache: true, log: zap.NewNop()}, out)
		r := &schedRig{s: s, out: out, info: m.info, t0: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
		r.deliver(loadIn{spans: []*span{open(0, 8)}, done: make(chan struct{})})
		t.Cleanup(s.shutdown)
		c.rigs = append(c.rigs, r)
	}
	prompt := []int32{1, 17, 300, 42, 9, 77}
	const n = 12
	ref := referenceTokens(t, prompt, n, prefixSampling)

	// gen runs session sid for tokens k.. of its n, from what it has.
	gen := func(sid SessionID, have []int32, k int) []int32 {
		t.Helper()
		for len(have) < k {
			st := &Step{Session: sid, Entry: schedEntry, Hops: c.hops, Pos: len(prompt) + len(have) - 1}
			if len(have) == 0 {
				st.Pos, st.Tokens = 0, prompt
				st.Open = &Open{MaxTokens: len(prompt) + n, Model: m.hash, Sampling: prefixSampling}
			} else {
				st.Tokens = []int32{have[len(have)-1]}
			}
			tok, em, _ := c.step(st)
			if em != nil {
				t.Fatalf("session %v step %d: %s: %s", sid, len(have), em.Code, em.Text)
			}
			have = append(have, tok.Token)
		}
		return have
	}
	s1 := SessionID{1}
	got := gen(s1, nil, n/2)
	if subs.Load() != 2 {
		t.Fatalf("%d views opened, want one per hop", subs.Load())
	}

	// The switch on the second hop: layers [2, 8) as a new stage, and
	// [0, 2) released.
	r := c.rigs[1]
	old := r.s.stages.slots[3].sp
	r.deliver(loadIn{spans: []*span{open(2, 8)}, done: make(chan struct{})},
		releaseIn{keep: layers.Range{Start: 2, End: 8}, done: make(chan struct{})})
	st := r.s.status.Load()
	if !slices.Equal(st.Spans, []layers.Range{{Start: 2, End: 8}}) || st.Loaded != 8 {
		t.Fatalf("after the switch: stages %v, %d layers loaded; want [2, 8) serving and [0, 2) kept for the open session", st.Spans, st.Loaded)
	}
	if got = gen(s1, got, n); !slices.Equal(got, ref) {
		t.Fatalf("the session across the switch: %v, single process %v", got, ref)
	}
	s2 := SessionID{2}
	if got2 := gen(s2, nil, n); !slices.Equal(got2, ref) {
		t.Fatalf("a session after the switch: %v, single process %v", got2, ref)
	}
	if sp := r.s.sessions[hopKey{s2, 3}].segs[0].sp; sp == old || sp.lo != 2 {
		t.Fatalf("the new session runs on the stage over [%d, %d)", sp.lo, sp.hi)
	}
	c.close(s1)
	c.close(s2)
	st = r.s.status.Load()
	if _, ok := r.s.stages.spans[old]; ok || st.Loaded != 6 || r.s.stages.weightBytes() != r.s.stages.slots[2].sp.info.WeightBytes {
		t.Fatalf("after the sessions: %d layers loaded, old stage open %v, weights %d", st.Loaded, ok, r.s.stages.weightBytes())
	}
	if ranges.Load() != 3 {
		t.Errorf("%d range stages opened, want 3", ranges.Load())
	}
}

// TestWarmRangeStage: a node on an engine with Ranges loads its range as
// one stage and serves it to a single-process run's tokens; a warmup of
// a range that one stage does not hold exactly loads it whole beside the
// old one, and the node serves it after the switch to the same tokens.
func TestWarmRangeStage(t *testing.T) {
	dirs, ids := staticIDs(t, 1)
	m, err := layers.NewLayerMap(8, 1, layers.Stage{Node: ids[0].String(), Range: layers.Range{Start: 0, End: 8}})
	if err != nil {
		t.Fatal(err)
	}
	var ranges, subs atomic.Int32
	c := newTestCluster(t, WithStaticMap(m))
	b := c.add(WithDataDir(dirs[0]), WithEngine(rangedEngine(&ranges, &subs)))
	c.waitServing(10*time.Second, b.ID())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const prompt, maxTokens = "Once upon a time", 10
	ref := reference(t, prompt, maxTokens, engine.SamplingParams{})
	complete := func(when string) {
		t.Helper()
		res, err := b.Complete(ctx, Request{Prompt: prompt, MaxTokens: maxTokens})
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if !slices.Equal(res.Tokens, ref) {
			t.Fatalf("%s: %v, single process %v", when, res.Tokens, ref)
		}
	}
	spans := func() []layers.Range {
		st, err := b.svc.sched.sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.Spans
	}
	if got := spans(); !slices.Equal(got, []layers.Range{{Start: 0, End: 8}}) || ranges.Load() != 1 {
		t.Fatalf("serving stages %v after %d range stages opened: want one over [0, 8)", got, ranges.Load())
	}
	complete("one stage")
	// Held exactly: nothing to load.
	if err := b.warm.Load(ctx, 2, layers.Range{Start: 0, End: 8}); err != nil || ranges.Load() != 1 {
		t.Fatalf("a warmup of the range held: %v, %d range stages opened", err, ranges.Load())
	}
	if err := b.warm.Release(ctx, 3, layers.Range{Start: 0, End: 4}); err != nil {
		t.Fatal(err)
	}
	if err := b.warm.Load(ctx, 4, layers.Range{Start: 0, End: 8}); err != nil {
		t.Fatal(err)
	}
	if got := spans(); !slices.Equal(got, []layers.Range{{Start: 0, End: 8}}) || ranges.Load() != 2 || b.ann.held() != (layers.Range{Start: 0, End: 8}) {
		t.Fatalf("after the switch: stages %v, %d range stages opened, held %v", got, ranges.Load(), b.ann.held())
	}
	complete("after the switch")
}
