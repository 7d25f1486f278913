package routing

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stratanet/strata/layers"
)

func TestNewNeedsModel(t *testing.T) {
	if _, err := New(); !errors.Is(err, ErrConfig) {
		t.Fatalf("New() = %v, want ErrConfig", err)
	}
	bad := DefaultConfig()
	bad.UnknownRTT = 0
	if _, err := New(WithModel(mustModel(t, "llama-3-8b")), WithConfig(bad)); !errors.Is(err, ErrConfig) {
		t.Fatalf("zero unknown RTT: %v, want ErrConfig", err)
	}
	bad = DefaultConfig()
	bad.Slack = math.NaN()
	if _, err := New(WithModel(mustModel(t, "llama-3-8b")), WithConfig(bad)); !errors.Is(err, ErrConfig) {
		t.Fatalf("NaN slack: %v, want ErrConfig", err)
	}
	if _, err := New(WithModel(mustModel(t, "llama-3-8b")), WithScorer(nil, 1)); !errors.Is(err, ErrConfig) {
		t.Fatalf("nil scorer: %v, want ErrConfig", err)
	}
}

// The router's inlined roofline must be the layers cost model.
func TestDecodeMatchesCostModel(t *testing.T) {
	r := newRouter(t)
	for _, dev := range []string{"h100", "rtx4090", "t4", "m3-max"} {
		h := mustDevice(t, dev)
		for _, b := range []int{1, 7, 64, 256, 1000} {
			want := layers.DecodeLayerTime(r.model, h, b, r.ctx)
			if got := r.dec(&h, b); math.Abs(got-want) > 1e-12*want {
				t.Errorf("%s b=%d: dec = %g, layers = %g", dev, b, got, want)
			}
		}
	}
}

func TestRouteChainsExactly(t *testing.T) {
	r := newRouter(t)
	for seed := range uint64(30) {
		m, v := swarm(t, 60, 80, seed, 4)
		for k := range uint64(10) {
			p, err := r.Route(m, v, Request{Entry: "entry", PromptTokens: 100, Seed: k}, testNow)
			if err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			checkPath(t, m, p)
			if !(p.Cost > 0) || math.IsInf(p.Cost, 0) {
				t.Fatalf("seed %d: cost %v", seed, p.Cost)
			}
			sum := p.Terms.Latency + p.Terms.Load + p.Terms.Locality + p.Terms.Other
			if math.Abs(sum-p.Cost) > 1e-9*p.Cost {
				t.Fatalf("terms %+v do not add up to %v", p.Terms, p.Cost)
			}
		}
	}
}

// The cost Route reports is what Evaluate gives for the same hops, and the
// DP's unperturbed pick is no dearer than any of the k diverse paths.
func TestRouteCostMatchesEvaluate(t *testing.T) {
	r := newRouter(t, WithSlack(0))
	for seed := range uint64(10) {
		m, v := swarm(t, 80, 80, seed, 3)
		req := Request{Entry: "entry", PromptTokens: 500, MaxTokens: 64}
		p, err := r.Route(m, v, req, testNow)
		if err != nil {
			t.Fatal(err)
		}
		e, err := r.Evaluate(m, v, req, testNow, p)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(e.Cost-p.Cost) > 1e-9*p.Cost {
			t.Fatalf("route cost %v, evaluate %v", p.Cost, e.Cost)
		}
		paths, err := r.Paths(m, v, req, testNow, 5)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range paths {
			if q.Cost < p.Cost*(1-1e-9) {
				t.Fatalf("Paths found %v at %v, cheaper than Route's %v at %v", q, q.Cost, p, p.Cost)
			}
		}
	}
}

// A brute force over all chains on a small map agrees with the DP.
func TestRouteIsOptimal(t *testing.T) {
	m8 := mustSmallModel(t, 5)
	r, err := New(WithModel(m8), WithSlack(0))
	if err != nil {
		t.Fatal(err)
	}
	for seed := range uint64(40) {
		m, v := swarm(t, 5, 5, seed, 2)
		req := Request{Entry: "entry", PromptTokens: 10, MaxTokens: 8}
		p, err := r.Route(m, v, req, testNow)
		if err != nil {
			t.Fatal(err)
		}
		best := math.Inf(1)
		var bestPath Path
		var walk func(at int, hs []Hop)
		walk = func(at int, hs []Hop) {
			if at == 5 {
				q, err := r.Evaluate(m, v, req, testNow, Path{Hops: hs})
				if err == nil && q.Cost < best {
					best, bestPath = q.Cost, q
				}
				return
			}
			for _, s := range m.Stages {
				if !s.Contains(at) || (len(hs) > 0 && hs[len(hs)-1].Node == s.Node) {
					continue
				}
				for to := at + 1; to <= s.End; to++ {
					walk(to, append(slices.Clone(hs), Hop{s.Node, at, to}))
				}
			}
		}
		walk(0, nil)
		if math.Abs(p.Cost-best) > 1e-9*best {
			t.Fatalf("seed %d: DP %v at %v, brute force %v at %v", seed, p, p.Cost, bestPath, best)
		}
	}
}

func mustSmallModel(t testing.TB, L int) layers.ModelSpec {
	t.Helper()
	m, err := layers.NewModelSpec(layers.HyperParams{Name: "tiny", Layers: L, Hidden: 256, Heads: 4,
		FFN: 512, Vocab: 1000, BytesPerParam: 2})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A slow node that must start the path leaves it mid-range, where a fast
// one takes over: a turning point, with no range trimmed.
func TestTurningPoints(t *testing.T) {
	r := newRouter(t, WithSlack(0))
	m := mustMap(t, 80, stage("a", 0, 60), stage("b", 20, 80))
	v := NewView(fresh(t, "a", "t4"), fresh(t, "b", "h100"), fresh(t, "entry", "h100"))
	p, err := r.Route(m, v, Request{Entry: "entry"}, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if want := "a[0,20) → b[20,80)"; hops(p) != want {
		t.Fatalf("path %v, want %v", p, want)
	}
	// Swap the devices: now the fast node keeps the layers to its end.
	v = NewView(fresh(t, "a", "h100"), fresh(t, "b", "t4"), fresh(t, "entry", "h100"))
	p, err = r.Route(m, v, Request{Entry: "entry"}, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if want := "a[0,60) → b[60,80)"; hops(p) != want {
		t.Fatalf("path %v, want %v", p, want)
	}
}

// One node holding everything beats two faster ones when the link between
// them is slow enough, and loses when it is fast.
func TestCrossingCostsCount(t *testing.T) {
	m := mustMap(t, 80, stage("whole", 0, 80), stage("front", 0, 40), stage("back", 40, 80))
	v := NewView(fresh(t, "whole", "a100-80g"), fresh(t, "front", "h100"), fresh(t, "back", "h100"),
		fresh(t, "entry", "h100"))
	for _, id := range []string{"whole", "front", "back"} {
		v.SetRTT("entry", id, 1e-3)
	}
	r := newRouter(t, WithSlack(0))
	v.SetRTT("front", "back", 1e-3)
	p, err := r.Route(m, v, Request{Entry: "entry"}, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if hops(p) != "front[0,40) → back[40,80)" {
		t.Fatalf("fast link: %v", p)
	}
	v.SetRTT("front", "back", 0.3)
	p, err = r.Route(m, v, Request{Entry: "entry"}, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if hops(p) != "whole[0,80)" {
		t.Fatalf("slow link: %v", p)
	}
}

func TestNoPathIsAClearError(t *testing.T) {
	r := newRouter(t)
	m := mustMap(t, 80, stage("a", 0, 40), stage("b", 40, 80), stage("c", 30, 50))
	a, b, c := fresh(t, "a", "h100"), fresh(t, "b", "h100"), fresh(t, "c", "h100")
	b.Health = Suspect
	c.Phase = Draining
	v := NewView(a, b, c)
	_, err := r.Route(m, v, Request{}, testNow)
	if !errors.Is(err, ErrNoPath) {
		t.Fatalf("err = %v, want ErrNoPath", err)
	}
	for _, want := range []string{"layer 40", "b: not alive (filter live)", "c: joining or draining (filter phase)", "epoch 1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// A gap in the map itself.
	gap := mustMap(t, 80, stage("a", 0, 40), stage("b", 41, 80))
	if _, err := r.Route(gap, NewView(a, fresh(t, "b", "h100")), Request{}, testNow); !errors.Is(err, ErrNoPath) ||
		!strings.Contains(err.Error(), "layer 40 has no holder") {
		t.Fatalf("gap: %v", err)
	}
	// Nodes the view does not know.
	if _, err := r.Route(m, NewView(), Request{}, testNow); !errors.Is(err, ErrNoPath) ||
		!strings.Contains(err.Error(), "not in view") {
		t.Fatalf("empty view: %v", err)
	}
	// A nil view, an empty map, a map for another model.
	if _, err := r.Route(m, nil, Request{}, testNow); !errors.Is(err, ErrNoPath) {
		t.Fatalf("nil view: %v", err)
	}
	if _, err := r.Route(layers.LayerMap{}, v, Request{}, testNow); !errors.Is(err, layers.ErrBadMap) {
		t.Fatalf("empty map: %v", err)
	}
	if _, err := r.Route(mustMap(t, 32, stage("a", 0, 32)), v, Request{}, testNow); !errors.Is(err, ErrWrongModel) {
		t.Fatalf("wrong model: %v", err)
	}
}

// Two disjoint pipelines, the first clearly better: each exclusion sends
// the request to the second.
func TestExclusions(t *testing.T) {
	r := newRouter(t, WithSlack(0))
	m := mustMap(t, 80, stage("fa", 0, 40), stage("fb", 40, 80), stage("sa", 0, 40), stage("sb", 40, 80))
	base := func() *View {
		return NewView(fresh(t, "fa", "h100"), fresh(t, "fb", "h100"), fresh(t, "sa", "rtx3090"), fresh(t, "sb", "rtx3090"))
	}
	p, err := r.Route(m, base(), Request{}, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if hops(p) != "fa[0,40) → fb[40,80)" {
		t.Fatalf("baseline: %v", p)
	}
	for _, tc := range []struct {
		name string
		f    func(*NodeState)
		ok   bool // the node stays routable
	}{
		{"suspect", func(n *NodeState) { n.Health = Suspect }, false},
		{"dead", func(n *NodeState) { n.Health = Dead }, false},
		{"draining", func(n *NodeState) { n.Phase = Draining }, false},
		{"joining", func(n *NodeState) { n.Phase = Joining }, false},
		{"warming", func(n *NodeState) { n.Phase = Warming }, true},
	} {
		v := base()
		v.Update("fb", tc.f)
		p, err := r.Route(m, v, Request{}, testNow)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if p.Uses("fb") != tc.ok {
			t.Errorf("%s: path %v", tc.name, p)
		}
	}
	p, err = r.Route(m, base(), Request{Avoid: []string{"fa"}}, testNow)
	if err != nil || p.Uses("fa") {
		t.Fatalf("avoid: %v %v", p, err)
	}
}

func TestDeterminism(t *testing.T) {
	r := newRouter(t)
	m, v := swarm(t, 200, 80, 3, 5)
	// The same states inserted in another order, with their links.
	w := NewView()
	ids := m.Nodes()
	for i := len(ids) - 1; i >= 0; i-- {
		n, _ := v.Node(ids[i])
		w.Set(n)
	}
	e, _ := v.Node("entry")
	w.Set(e)
	for _, a := range append(ids, "entry") {
		for _, b := range append(ids, "entry") {
			if x, ok := v.RTT(a, b); ok {
				w.SetRTT(a, b, x)
			}
		}
	}
	distinct := map[string]bool{}
	for seed := range uint64(50) {
		req := Request{Entry: "entry", PromptTokens: 200, Seed: seed}
		p1, err1 := r.Route(m, v, req, testNow)
		p2, err2 := r.Route(m, v, req, testNow)
		p3, err3 := r.Route(m, w, req, testNow)
		if err1 != nil || err2 != nil || err3 != nil {
			t.Fatal(err1, err2, err3)
		}
		if !p1.Same(p2) || !p1.Same(p3) || p1.Cost != p2.Cost || p1.Cost != p3.Cost {
			t.Fatalf("seed %d: %v / %v / %v", seed, p1, p2, p3)
		}
		distinct[hops(p1)] = true
	}
	if len(distinct) < 2 {
		t.Errorf("50 seeds gave one path: the slack does nothing")
	}
	t.Logf("50 seeds, %d distinct paths", len(distinct))
}

func TestSlackBound(t *testing.T) {
	r := newRouter(t, WithSlack(0.2))
	best := newRouter(t, WithSlack(0))
	for seed := range uint64(5) {
		m, v := swarm(t, 100, 80, seed, 4)
		req := Request{Entry: "entry", PromptTokens: 50}
		b, err := best.Route(m, v, req, testNow)
		if err != nil {
			t.Fatal(err)
		}
		for k := range uint64(40) {
			req.Seed = k
			p, err := r.Route(m, v, req, testNow)
			if err != nil {
				t.Fatal(err)
			}
			if p.Cost > 1.2*b.Cost*(1+1e-9) {
				t.Fatalf("picked %v at %v, best %v", p, p.Cost, b.Cost)
			}
		}
	}
}

// Unmeasured round trips are estimated, never free: per region pair from
// the largest measured one, else Config.UnknownRTT.
func TestUnknownRTT(t *testing.T) {
	r := newRouter(t, WithSlack(0))
	m := mustMap(t, 80, stage("a", 0, 40), stage("b", 40, 80))
	v := NewView(fresh(t, "a", "h100"), fresh(t, "b", "h100"), fresh(t, "entry", "h100"))
	p, err := r.Route(m, v, Request{Entry: "entry", MaxTokens: 1}, testNow)
	if err != nil {
		t.Fatal(err)
	}
	// Three crossings (entry→a, a→b, b→entry), each half an unknown round
	// trip plus the hop overhead, for one pass.
	c := DefaultConfig()
	want := 3 * (c.UnknownRTT/2 + c.HopOverhead)
	if math.Abs(p.Terms.Locality-want) > 1e-9 {
		t.Fatalf("locality %v, want %v", p.Terms.Locality, want)
	}
	// Measured links in the same region tell the router about the others.
	for _, n := range []string{"a", "b", "entry", "x", "y"} {
		v.Update(n, func(s *NodeState) { s.Region = "eu" })
	}
	v.Set(NodeState{ID: "x", Region: "eu"})
	v.Set(NodeState{ID: "y", Region: "eu"})
	v.SetRTT("x", "y", 0.004)
	p, err = r.Route(m, v, Request{Entry: "entry", MaxTokens: 1}, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if want := 3 * (0.004/2 + c.HopOverhead); math.Abs(p.Terms.Locality-want) > 1e-9 {
		t.Fatalf("region estimate: locality %v, want %v", p.Terms.Locality, want)
	}
	// A measured link is taken as measured, and moves the region's mean.
	v.SetRTT("a", "b", 0.001)
	p, _ = r.Route(m, v, Request{Entry: "entry", MaxTokens: 1}, testNow)
	if want := 2*(0.0025/2) + 0.001/2 + 3*c.HopOverhead; math.Abs(p.Terms.Locality-want) > 1e-9 {
		t.Fatalf("measured: locality %v, want %v", p.Terms.Locality, want)
	}
}

// Among two equal first hops, the measured near one beats the unmeasured
// one, and an unmeasured one beats a measured far one.
func TestMeasuredVersusUnknown(t *testing.T) {
	r := newRouter(t, WithSlack(0))
	m := mustMap(t, 80, stage("a", 0, 80), stage("b", 0, 80))
	v := NewView(fresh(t, "a", "h100"), fresh(t, "b", "h100"), fresh(t, "entry", "h100"),
		NodeState{ID: "x"}, NodeState{ID: "y"})
	v.SetRTT("x", "y", 0.05) // what links here are like
	v.SetRTT("entry", "b", 0.03)
	p, _ := r.Route(m, v, Request{Entry: "entry"}, testNow)
	if hops(p) != "b[0,80)" {
		t.Fatalf("near measured: %v", p)
	}
	v.SetRTT("entry", "b", 0.5)
	p, _ = r.Route(m, v, Request{Entry: "entry"}, testNow)
	if hops(p) != "a[0,80)" {
		t.Fatalf("far measured: %v", p)
	}
}

// Stale figures are charged a fraction more, not excluded, and not read as
// overload.
func TestStaleIsPenalisedNotExcluded(t *testing.T) {
	r := newRouter(t, WithSlack(0))
	m := mustMap(t, 80, stage("a", 0, 80), stage("b", 0, 80))
	a, b := fresh(t, "a", "h100"), fresh(t, "b", "h100")
	a.Updated = testNow.Add(-time.Hour)
	v := NewView(a, b)
	p, err := r.Route(m, v, Request{}, testNow)
	if err != nil || hops(p) != "b[0,80)" {
		t.Fatalf("stale vs fresh: %v %v", p, err)
	}
	q, err := r.Evaluate(m, v, Request{}, testNow, Path{Hops: []Hop{{"a", 0, 80}}})
	if err != nil {
		t.Fatal(err)
	}
	if ratio := q.Cost / p.Cost; math.Abs(ratio-1.25) > 1e-9 {
		t.Fatalf("stale costs %v× fresh, want 1.25", ratio)
	}
	// The only holder being stale still routes; a stale idle node beats a
	// fresh one with a long queue.
	v.Update("b", func(n *NodeState) { n.Health = Suspect })
	if _, err := r.Route(m, v, Request{}, testNow); err != nil {
		t.Fatalf("only holder stale: %v", err)
	}
	v.Update("b", func(n *NodeState) { n.Health = Alive; n.QueueDepth = 400 })
	if p, _ := r.Route(m, v, Request{}, testNow); hops(p) != "a[0,80)" {
		t.Fatalf("stale idle vs fresh busy: %v", p)
	}
	// Never heard from counts as stale too.
	v.Update("b", func(n *NodeState) { n.QueueDepth = 0; n.Updated = time.Time{} })
	q2, _ := r.Evaluate(m, v, Request{}, testNow, Path{Hops: []Hop{{"b", 0, 80}}})
	if math.Abs(q2.Cost-q.Cost) > 1e-9*q.Cost {
		t.Fatalf("zero Updated: %v, want %v", q2.Cost, q.Cost)
	}
}

func TestKVCapacity(t *testing.T) {
	r := newRouter(t, WithSlack(0))
	m := mustMap(t, 80, stage("a", 0, 80), stage("b", 0, 80))
	a, b := fresh(t, "a", "h100"), fresh(t, "b", "rtx3090")
	a.FreeKV = 100
	v := NewView(a, b)
	req := Request{PromptTokens: 500, MaxTokens: 100}
	p, err := r.Route(m, v, req, testNow)
	if err != nil || hops(p) != "b[0,80)" {
		t.Fatalf("short KV: %v %v", p, err)
	}
	q, _ := r.Evaluate(m, v, req, testNow, Path{Hops: []Hop{{"a", 0, 80}}})
	if q.Terms.Load < DefaultConfig().KVPenalty {
		t.Fatalf("no KV penalty in %+v", q.Terms)
	}
	// Unknown free KV is not short; enough is not short.
	v.Update("a", func(n *NodeState) { n.FreeKV = -1 })
	if p, _ := r.Route(m, v, req, testNow); hops(p) != "a[0,80)" {
		t.Fatalf("unknown KV: %v", p)
	}
	v.Update("a", func(n *NodeState) { n.FreeKV = 600 })
	if p, _ := r.Route(m, v, req, testNow); hops(p) != "a[0,80)" {
		t.Fatalf("enough KV: %v", p)
	}
	// Penalised but still used when it is the only holder; excluded under
	// the KV filter.
	v.Update("a", func(n *NodeState) { n.FreeKV = 0 })
	v.Update("b", func(n *NodeState) { n.Health = Dead })
	if _, err := r.Route(m, v, req, testNow); err != nil {
		t.Fatalf("only holder short of KV: %v", err)
	}
	strict := newRouter(t, WithFilters(LiveFilter{}, PhaseFilter{}, KVFilter{}))
	if _, err := strict.Route(m, v, req, testNow); !errors.Is(err, ErrNoPath) || !strings.Contains(err.Error(), "a: too little free KV cache (filter kv)") {
		t.Fatalf("KV filter: %v", err)
	}
}

// A measured layer latency overrides the device's modelled speed.
func TestMeasuredLatency(t *testing.T) {
	r := newRouter(t, WithSlack(0))
	m := mustMap(t, 80, stage("a", 0, 80), stage("b", 0, 80))
	a, b := fresh(t, "a", "h100"), fresh(t, "b", "h100")
	v := NewView(a, b)
	base, _ := r.Evaluate(m, v, Request{}, testNow, Path{Hops: []Hop{{"a", 0, 80}}})
	h := mustDevice(t, "h100")
	v.Update("a", func(n *NodeState) { n.LayerLatency = 10 * r.dec(&h, 1) })
	v.Update("b", func(n *NodeState) { n.LayerLatency = r.dec(&h, 1) })
	if p, _ := r.Route(m, v, Request{}, testNow); hops(p) != "b[0,80)" {
		t.Fatalf("slow measured: %v", p)
	}
	slow, _ := r.Evaluate(m, v, Request{}, testNow, Path{Hops: []Hop{{"a", 0, 80}}})
	if ratio := slow.Terms.Latency / base.Terms.Latency; math.Abs(ratio-10) > 0.01 {
		t.Fatalf("10× measured latency gives %v× compute", ratio)
	}
	// Garbage measurements fall back to the model: b's measured 1×.
	for _, x := range []float64{math.NaN(), math.Inf(1), -1, 1e300} {
		v.Update("a", func(n *NodeState) { n.LayerLatency = x })
		q, err := r.Evaluate(m, v, Request{}, testNow, Path{Hops: []Hop{{"a", 0, 80}}})
		if err != nil || q.Cost != base.Cost {
			t.Fatalf("latency %v: cost %v (base %v) %v", x, q.Cost, base.Cost, err)
		}
	}
}

// A node that has measured nothing yet is priced at its device's measured
// peers' median ratio to the model, not at the model alone: a fresh node
// must not look faster than the same hardware already measured.
func TestUnmeasuredTakesItsDevicesRatio(t *testing.T) {
	r := newRouter(t, WithSlack(0))
	h := mustDevice(t, "h100")
	m := mustMap(t, 80, stage("a", 0, 80), stage("b", 0, 80), stage("c", 0, 80), stage("d", 0, 80), stage("e", 0, 80))
	v := NewView(fresh(t, "a", "h100"), fresh(t, "b", "h100"), fresh(t, "c", "h100"), fresh(t, "d", "a100-80g"), fresh(t, "e", "h100"))
	one := func(id string) Path { return Path{Hops: []Hop{{id, 0, 80}}} }
	model, _ := r.Evaluate(m, v, Request{}, testNow, one("e"))
	dModel, _ := r.Evaluate(m, v, Request{}, testNow, one("d"))
	// Measured at 2×, 3× and 40×: the median is 3×.
	for id, x := range map[string]float64{"a": 2, "b": 3, "c": 40} {
		v.Update(id, func(n *NodeState) { n.LayerLatency = x * r.dec(&h, 1) })
	}
	got, _ := r.Evaluate(m, v, Request{}, testNow, one("e"))
	if ratio := got.Terms.Latency / model.Terms.Latency; math.Abs(ratio-3) > 0.01 {
		t.Fatalf("unmeasured h100 priced at %v× the model, want its peers' median 3×", ratio)
	}
	if p, _ := r.Route(m, v, Request{Avoid: []string{"d"}}, testNow); hops(p) != "a[0,80)" {
		t.Fatalf("route %v: want the fastest h100, a", p)
	}
	// An even count takes the middle two's mean.
	v.Update("c", func(n *NodeState) { n.LayerLatency = 0 })
	got, _ = r.Evaluate(m, v, Request{}, testNow, one("e"))
	if ratio := got.Terms.Latency / model.Terms.Latency; math.Abs(ratio-2.5) > 0.01 {
		t.Fatalf("median of 2× and 3× gave %v×", ratio)
	}
	// Another device, with no measured peer, keeps the model.
	if d, _ := r.Evaluate(m, v, Request{}, testNow, one("d")); d.Terms.Latency != dModel.Terms.Latency {
		t.Fatalf("unmeasured a100-80g priced at %v, its model says %v", d.Terms.Latency, dModel.Terms.Latency)
	}
	// A declared speed is a measurement of its own and is kept.
	v.Update("e", func(n *NodeState) { n.Speed = 2 })
	got, _ = r.Evaluate(m, v, Request{}, testNow, one("e"))
	if ratio := got.Terms.Latency / model.Terms.Latency; math.Abs(ratio-0.5) > 0.01 {
		t.Fatalf("speed 2 gave %v× the model", ratio)
	}
}

func TestLoadAndRelay(t *testing.T) {
	r := newRouter(t, WithSlack(0))
	m := mustMap(t, 80, stage("a", 0, 40), stage("b", 40, 80), stage("c", 0, 40), stage("d", 40, 80))
	v := NewView(fresh(t, "a", "h100"), fresh(t, "b", "h100"), fresh(t, "c", "h100"), fresh(t, "d", "h100"))
	v.SetRTT("a", "b", 0.01)
	v.SetRTT("c", "d", 0.01)
	v.SetRTT("a", "d", 0.01)
	v.SetRTT("c", "b", 0.01)
	v.Update("a", func(n *NodeState) { n.QueueDepth = 300 })
	p, _ := r.Route(m, v, Request{}, testNow)
	if p.Uses("a") {
		t.Fatalf("queued node used: %v", p)
	}
	v.Update("a", func(n *NodeState) { n.QueueDepth = 0 })
	v.Update("d", func(n *NodeState) { n.Relayed = true })
	p, _ = r.Route(m, v, Request{}, testNow)
	if p.Uses("d") {
		t.Fatalf("relayed node used: %v", p)
	}
	q, _ := r.Evaluate(m, v, Request{}, testNow, Path{Hops: []Hop{{"a", 0, 40}, {"d", 40, 80}}})
	c := DefaultConfig()
	if extra := q.Terms.Locality - p.Terms.Locality; extra < 256*c.RelayDelay {
		t.Fatalf("relay charged %v, want ≥ %v", extra, 256*c.RelayDelay)
	}
}

// Custom scorers and filters plug in without touching the DP.
type avoidPrefix string

func (a avoidPrefix) Name() string { return "avoid " + string(a) }
func (a avoidPrefix) Score(_ *Request, e *Estimate) NodeCost {
	if strings.HasPrefix(e.Node.ID, string(a)) {
		return NodeCost{Visit: 1000}
	}
	return NodeCost{}
}

type onlyRegion string

func (o onlyRegion) Name() string { return "region" }
func (o onlyRegion) Keep(_ *Request, n *NodeState, _ time.Time) bool {
	return n.Region == string(o)
}

func TestPlugins(t *testing.T) {
	m := mustMap(t, 80, stage("a", 0, 80), stage("b", 0, 80))
	a, b := fresh(t, "a", "h100"), fresh(t, "b", "t4")
	b.Region = "eu"
	v := NewView(a, b)
	r := newRouter(t, WithSlack(0), WithScorer(avoidPrefix("a"), 1))
	p, err := r.Route(m, v, Request{}, testNow)
	if err != nil || hops(p) != "b[0,80)" {
		t.Fatalf("scorer: %v %v", p, err)
	}
	if p2, _ := r.Evaluate(m, v, Request{}, testNow, Path{Hops: []Hop{{"a", 0, 80}}}); p2.Terms.Other != 1000 {
		t.Fatalf("other terms %+v", p2.Terms)
	}
	r = newRouter(t, WithFilters(LiveFilter{}, onlyRegion("eu")))
	if p, _ := r.Route(m, v, Request{}, testNow); hops(p) != "b[0,80)" {
		t.Fatalf("filter: %v", p)
	}
	// Weights: with compute ignored, the slow device is as good as the fast.
	r = newRouter(t, WithSlack(0), WithWeights(Weights{Latency: 0, Load: 1, Locality: 1}))
	pa, _ := r.Evaluate(m, v, Request{}, testNow, Path{Hops: []Hop{{"a", 0, 80}}})
	pb, _ := r.Evaluate(m, v, Request{}, testNow, Path{Hops: []Hop{{"b", 0, 80}}})
	if pa.Cost != pb.Cost || pa.Terms.Latency != 0 {
		t.Fatalf("latency weight 0: %+v vs %+v", pa, pb)
	}
}

func TestPathsAreDiverse(t *testing.T) {
	r := newRouter(t)
	var stages []layers.Stage
	var states []NodeState
	devs := []string{"h100", "a100-80g", "l40s", "rtx4090"}
	for k, d := range devs {
		for h := range 2 {
			id := string(rune('a'+k)) + string(rune('0'+h))
			stages = append(stages, stage(id, 40*h, 40*h+40))
			states = append(states, fresh(t, id, d))
		}
	}
	m := mustMap(t, 80, stages...)
	v := NewView(states...)
	paths, err := r.Paths(m, v, Request{}, testNow, 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 4 {
		t.Fatalf("%d paths", len(paths))
	}
	seen := map[string]bool{}
	for i, p := range paths {
		checkPath(t, m, p)
		if i > 0 && p.Cost < paths[i-1].Cost {
			t.Fatalf("not sorted: %v", paths)
		}
		for _, n := range p.Nodes() {
			if seen[n] {
				t.Fatalf("node %s reused in %v", n, paths)
			}
			seen[n] = true
		}
		t.Logf("path %d: %v cost %.3f s", i, p, p.Cost)
	}
	if paths[0].Nodes()[0] != "a0" {
		t.Errorf("best path %v, want the h100 one", paths[0])
	}
	// The candidate mode of Route picks among them, within the slack.
	rk := newRouter(t, WithConfig(func() Config { c := DefaultConfig(); c.Candidates = 4; c.Slack = 0.5; return c }()))
	got := map[string]int{}
	for seed := range uint64(200) {
		p, err := rk.Route(m, v, Request{Seed: seed}, testNow)
		if err != nil {
			t.Fatal(err)
		}
		if p.Cost > 1.5*paths[0].Cost {
			t.Fatalf("picked %v beyond the slack", p)
		}
		got[p.Nodes()[0]]++
	}
	if len(got) < 2 {
		t.Fatalf("candidate mode always picks one path: %v", got)
	}
	t.Logf("candidate mode over 200 seeds: %v", got)
	if ps, _ := r.Paths(m, v, Request{}, testNow, 0); ps != nil {
		t.Fatal("k = 0 gave paths")
	}
}

func TestPickWithin(t *testing.T) {
	paths := []Path{{Cost: 1.0}, {Cost: 1.05}, {Cost: 2}}
	for i := range paths {
		paths[i].Hops = []Hop{{Node: string(rune('a' + i)), From: 0, To: 1}}
	}
	count := map[string]int{}
	for seed := range uint64(2000) {
		p, ok := PickWithin(paths, 0.1, seed)
		if !ok {
			t.Fatal("no pick")
		}
		count[p.Hops[0].Node]++
		q, _ := PickWithin(paths, 0.1, seed)
		if !q.Same(p) {
			t.Fatal("not deterministic")
		}
	}
	if count["c"] != 0 || count["a"] <= count["b"] || count["b"] < 500 {
		t.Fatalf("picks %v", count)
	}
	if p, _ := PickWithin(paths, 0, 1); p.Hops[0].Node != "a" {
		t.Fatalf("slack 0 picked %v", p)
	}
	if _, ok := PickWithin(nil, 0.1, 1); ok {
		t.Fatal("picked from nothing")
	}
	if p, ok := PickWithin(paths, math.NaN(), 1); !ok || p.Hops[0].Node != "a" {
		t.Fatal("NaN slack")
	}
}

func TestPathValidate(t *testing.T) {
	for _, tc := range []struct {
		p  Path
		ok bool
	}{
		{Path{Hops: []Hop{{"a", 0, 4}}}, true},
		{Path{Hops: []Hop{{"a", 0, 2}, {"b", 2, 4}}}, true},
		{Path{}, false},
		{Path{Hops: []Hop{{"a", 0, 3}}}, false},
		{Path{Hops: []Hop{{"a", 1, 4}}}, false},
		{Path{Hops: []Hop{{"a", 0, 2}, {"b", 3, 4}}}, false},
		{Path{Hops: []Hop{{"a", 0, 2}, {"a", 2, 4}}}, false},
		{Path{Hops: []Hop{{"a", 0, 2}, {"b", 2, 2}, {"c", 2, 4}}}, false},
		{Path{Hops: []Hop{{"", 0, 4}}}, false},
	} {
		err := tc.p.Validate(4)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrBadPath)) {
			t.Errorf("%v: %v", tc.p, err)
		}
	}
}

func TestFleetFallback(t *testing.T) {
	mod := mustModel(t, "llama-3-70b")
	f, err := layers.NewFleet(mod, []layers.Node{
		{ID: "a", Hardware: mustDevice(t, "h100")},
		{ID: "b", Hardware: mustDevice(t, "t4")},
	}, layers.DefaultCostParams())
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(WithFleet(f), WithSlack(0))
	if err != nil {
		t.Fatal(err)
	}
	m := mustMap(t, 80, stage("a", 0, 80), stage("b", 0, 80))
	// States that do not say their device: the fleet tells them apart.
	v := NewView(NodeState{ID: "a", FreeKV: -1, Updated: testNow}, NodeState{ID: "b", FreeKV: -1, Updated: testNow})
	p, err := r.Route(m, v, Request{}, testNow)
	if err != nil || hops(p) != "a[0,80)" {
		t.Fatalf("%v %v", p, err)
	}
}

// Ten thousand nodes route, and quickly.
func TestTenThousandNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	r := newRouter(t)
	m, v := swarm(t, 10000, 80, 1, 8)
	start := time.Now()
	for seed := range uint64(5) {
		p, err := r.Route(m, v, Request{Entry: "entry", Seed: seed}, testNow)
		if err != nil {
			t.Fatal(err)
		}
		checkPath(t, m, p)
	}
	t.Logf("10,000 nodes: %v per route", time.Since(start)/5)
}

// TestRelayedLinkCosts: the same two nodes cost more when the second is
// relayed, with the round trip measured through its relay and its
// circuit's measured bandwidth; the measured figures are what count: a
// faster measured circuit costs less, a slower one more, and the fixed
// RelayDelay is charged only while no round trip of the node was measured.
func TestRelayedLinkCosts(t *testing.T) {
	r := newRouter(t, WithSlack(0))
	m := mustMap(t, 80, stage("a", 0, 40), stage("b", 40, 80))
	path := Path{Hops: []Hop{{"a", 0, 40}, {"b", 40, 80}}}
	cost := func(v *View) float64 {
		t.Helper()
		p, err := r.Evaluate(m, v, Request{Entry: "a"}, testNow, path)
		if err != nil {
			t.Fatal(err)
		}
		return p.Cost
	}
	direct := NewView(fresh(t, "a", "h100"), fresh(t, "b", "h100"))
	direct.SetRTT("a", "b", 0.002)
	relayed := func(rtt, bw float64) *View {
		v := direct.Clone()
		v.Update("b", func(n *NodeState) { n.Relayed, n.RelayBandwidth = true, bw })
		if rtt > 0 {
			v.SetRTT("a", "b", rtt)
		}
		return v
	}
	cDirect := cost(direct)
	// Through a relay: 30 ms measured round trip, 5 MB/s measured.
	cRelayed := cost(relayed(0.030, 5e6))
	if !(cRelayed > cDirect) {
		t.Fatalf("relayed path %v, direct %v: relay costs nothing", cRelayed, cDirect)
	}
	// The measured round trip counts: 256 steps pay half of each of the
	// two crossings' extra 28 ms at least.
	if extra := cRelayed - cDirect; extra < 256*0.028/2 {
		t.Fatalf("relayed path costs %v more, below its measured round trip's share", extra)
	}
	if faster, slower := cost(relayed(0.030, 50e6)), cost(relayed(0.030, 0.5e6)); !(faster < cRelayed && cRelayed < slower) {
		t.Fatalf("measured bandwidth ignored: 50 MB/s %v, 5 MB/s %v, 0.5 MB/s %v", faster, cRelayed, slower)
	}
	// With nothing measured for b, the fixed delay stands in.
	unmeasured := NewView(fresh(t, "a", "h100"), fresh(t, "b", "h100"))
	unmeasured.Update("b", func(n *NodeState) { n.Relayed, n.RelayBandwidth = true, 5e6 })
	plain := NewView(fresh(t, "a", "h100"), fresh(t, "b", "h100"))
	c := DefaultConfig()
	if extra := cost(unmeasured) - cost(plain); extra < 256*c.RelayDelay {
		t.Fatalf("unmeasured relayed node charged %v more, want ≥ %v", extra, 256*c.RelayDelay)
	}
}
