package routing

import (
	"errors"
	"testing"
)

func TestFixedPipelines(t *testing.T) {
	m := mustMap(t, 80,
		stage("a", 0, 40), stage("b", 40, 80),
		stage("c", 0, 30), stage("d", 25, 80), // overlaps: trimmed to [30,80)
		stage("e", 0, 50), // no continuation left
		stage("f", 45, 80),
	)
	ps := FixedPipelines(m)
	var got []string
	for _, p := range ps {
		checkPath(t, m, p)
		got = append(got, p.String())
	}
	want := []string{"a[0,40) → b[40,80)", "c[0,30) → d[30,80)", "e[0,50) → f[50,80)"}
	if len(got) != len(want) {
		t.Fatalf("pipelines %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("pipelines %v, want %v", got, want)
		}
	}
}

func TestRoundRobin(t *testing.T) {
	r := newRouter(t)
	m, v, _ := fourPipelines(t)
	rr, err := NewRoundRobin(r, FixedPipelines(m)...)
	if err != nil {
		t.Fatal(err)
	}
	if len(rr.Pipelines()) != 4 {
		t.Fatalf("%d pipelines", len(rr.Pipelines()))
	}
	// Load-blind: it takes turns even when one pipeline is swamped.
	v.Update("front0", func(s *NodeState) { s.QueueDepth = 10000 })
	count := map[string]int{}
	for i := range 400 {
		p, err := rr.Route(m, v, Request{Entry: "entry", Seed: uint64(i)}, testNow)
		if err != nil {
			t.Fatal(err)
		}
		checkPath(t, m, p)
		if !(p.Cost > 0) {
			t.Fatalf("unpriced path %+v", p)
		}
		count[p.Hops[0].Node]++
	}
	for _, c := range count {
		if c != 100 {
			t.Fatalf("turns %v", count)
		}
	}
	// It skips pipelines on excluded nodes, and says so when none is left.
	v.Update("back1", func(s *NodeState) { s.Health = Suspect })
	for range 8 {
		p, err := rr.Route(m, v, Request{}, testNow)
		if err != nil || p.Uses("back1") {
			t.Fatalf("%v %v", p, err)
		}
	}
	for _, id := range []string{"front0", "front2", "back3"} {
		v.Update(id, func(s *NodeState) { s.Phase = Draining })
	}
	if _, err := rr.Route(m, v, Request{}, testNow); !errors.Is(err, ErrNoPath) {
		t.Fatalf("all pipelines down: %v", err)
	}
	if _, err := NewRoundRobin(nil, FixedPipelines(m)...); !errors.Is(err, ErrConfig) {
		t.Fatal(err)
	}
	if _, err := NewRoundRobin(r); !errors.Is(err, ErrNoPath) {
		t.Fatal(err)
	}
	if _, err := NewRoundRobin(r, Path{Hops: []Hop{{"a", 0, 10}}}); !errors.Is(err, ErrBadPath) {
		t.Fatal(err)
	}
}

// Round robin against the DP on the same swamped swarm: the DP's requests
// are cheaper on average.
func TestDPBeatsRoundRobinUnderSkew(t *testing.T) {
	r := newRouter(t)
	m, v, _ := fourPipelines(t)
	v.Update("front0", func(s *NodeState) { s.Speed = 0.25 })
	rr, err := NewRoundRobin(r, FixedPipelines(m)...)
	if err != nil {
		t.Fatal(err)
	}
	total := func(p Policy) float64 {
		w := v.Clone()
		sum := 0.0
		for i := range 2000 {
			path, err := p.Route(m, w, Request{Entry: "entry", Seed: uint64(i)}, testNow)
			if err != nil {
				t.Fatal(err)
			}
			sum += path.Cost
			for _, h := range path.Hops {
				w.Update(h.Node, func(s *NodeState) { s.QueueDepth++ })
			}
		}
		return sum / 2000
	}
	dp, base := total(r), total(rr)
	t.Logf("mean estimated request time: DP %.2f s, round robin %.2f s", dp, base)
	if dp >= base {
		t.Fatalf("DP %.2f s is not below round robin %.2f s", dp, base)
	}
}
