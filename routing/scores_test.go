package routing

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// TestScores: each unit score falls on the node made worse for it.
func TestScores(t *testing.T) {
	m := mustMap(t, 80, stage("a", 0, 80), stage("b", 0, 80))
	base := func() *View {
		a, b := fresh(t, "a", "rtx4090"), fresh(t, "b", "rtx4090")
		a.Speed = 1.05 // a is the faster node
		v := NewView(fresh(t, "entry", "h100"), a, b)
		v.SetRTT("entry", "a", 0.01)
		v.SetRTT("entry", "b", 0.01)
		return v
	}
	prefix := BlockHashes(seq(1, 512), 64)
	holds := NewPrefixSummary(DefaultSummaryBits)
	holds.Add(prefix...)
	pol := oneProfile(t, []string{"live"}, "latency:1", "load:1", "locality:1", "stale:0.25")
	r := pol.(*Profile).Router()
	for _, tc := range []struct {
		name   string
		worsen func(*NodeState)
		view   func(*View)
		prefix bool
		field  func(Scores) float64
		aZero  bool // a's score must be exactly 0
		bOne   bool // b's score must be exactly 1
	}{
		{name: "load", worsen: func(n *NodeState) { n.QueueDepth = 40 }, field: func(s Scores) float64 { return s.Load }, bOne: true},
		{name: "load kv short", worsen: func(n *NodeState) { n.FreeKV = 100 }, field: func(s Scores) float64 { return s.Load }, aZero: true, bOne: true},
		{name: "locality", view: func(v *View) { v.SetRTT("entry", "a", 0.3) }, field: func(s Scores) float64 { return s.Locality }},
		{name: "stale", worsen: func(n *NodeState) { n.Updated = testNow.Add(-time.Minute) },
			field: func(s Scores) float64 { return s.Stale }, aZero: true, bOne: true},
		{name: "kv-headroom", worsen: func(n *NodeState) { n.FreeKV = 700 }, field: func(s Scores) float64 { return s.KVHeadroom }},
		{name: "prefix-affinity", prefix: true, view: func(v *View) { v.Update("b", func(n *NodeState) { n.Prefixes = holds }) },
			field: func(s Scores) float64 { return s.PrefixAffinity }, aZero: true, bOne: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := base()
			if tc.worsen != nil {
				v.Update("a", tc.worsen)
			}
			if tc.view != nil {
				tc.view(v)
			}
			req := Request{Entry: "entry", PromptTokens: 512, MaxTokens: 128, Seed: 1}
			if tc.prefix {
				req.Prefix = prefix
			}
			on := func(node string) Scores {
				p, err := r.Evaluate(m, v, req, testNow, Path{Hops: []Hop{{Node: node, From: 0, To: 80}}})
				if err != nil {
					t.Fatal(err)
				}
				checkUnit(t, p.Terms.Scores)
				return p.Terms.Scores
			}
			a, b := on("a"), on("b")
			if !(tc.field(a) < tc.field(b)) || (tc.bOne && tc.field(b) != 1) || (tc.aZero && tc.field(a) != 0) {
				t.Errorf("a %+v, b %+v: want a's %s below b's (a 0: %v, b 1: %v)", a, b, tc.name, tc.aZero, tc.bOne)
			}
		})
	}
	t.Run("latency", func(t *testing.T) {
		v := base()
		req := Request{Entry: "entry", PromptTokens: 512, MaxTokens: 128}
		pa, err := r.Evaluate(m, v, req, testNow, Path{Hops: []Hop{{Node: "a", From: 0, To: 80}}})
		if err != nil {
			t.Fatal(err)
		}
		pb, err := r.Evaluate(m, v, req, testNow, Path{Hops: []Hop{{Node: "b", From: 0, To: 80}}})
		if err != nil {
			t.Fatal(err)
		}
		if a, b := pa.Terms.Scores.Latency, pb.Terms.Scores.Latency; a != 1 || !(b < 1) || !(b > 0) {
			t.Errorf("latency scores: fast a %v, slow b %v; want 1 and in (0, 1)", a, b)
		}
		// The slow node's score is the fast one's share of its time.
		if got, want := pb.Terms.Scores.Latency, pa.Terms.Latency/pb.Terms.Latency; math.Abs(got-want) > 0.02 {
			t.Errorf("slow node's latency score %v, want about %v (a's latency over b's)", got, want)
		}
	})
}

// Over a large synthetic swarm every path's scores stay in [0, 1], and
// the load and latency scores do tell paths apart.
func TestScoresInUnitRange(t *testing.T) {
	r, err := New(WithModel(mustModel(t, "llama-3-70b")))
	if err != nil {
		t.Fatal(err)
	}
	m, v := swarm(t, 200, 80, 3, 4)
	// Sessions waiting for KV are rare in the synthetic swarm and make a
	// node KV-short, so the router avoids them: queue on every third node
	// so that some paths cannot, and their load scores differ.
	for i := 0; i < 200; i += 3 {
		v.Update(fmt.Sprintf("n%05d", i), func(ns *NodeState) { ns.QueueDepth = 1 + i%4 })
	}
	var latency, load []float64
	for seed := range uint64(20) {
		paths, err := r.Paths(m, v, Request{Entry: "entry", PromptTokens: 300, MaxTokens: 50, Seed: seed}, testNow, 4)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range paths {
			checkUnit(t, p.Terms.Scores)
			latency = append(latency, p.Terms.Scores.Latency)
			load = append(load, p.Terms.Scores.Load)
		}
	}
	spread := func(xs []float64) float64 {
		lo, hi := 1.0, 0.0
		for _, x := range xs {
			lo, hi = min(lo, x), max(hi, x)
		}
		return hi - lo
	}
	if spread(latency) == 0 || spread(load) == 0 {
		t.Errorf("latency scores spread %v, load %v: every path scored alike", spread(latency), spread(load))
	}
}

func checkUnit(t *testing.T, s Scores) {
	t.Helper()
	for _, x := range []float64{s.Latency, s.Load, s.Locality, s.Stale, s.KVHeadroom, s.PrefixAffinity} {
		if !(x >= 0 && x <= 1) {
			t.Fatalf("scores %+v outside [0, 1]", s)
		}
	}
}
