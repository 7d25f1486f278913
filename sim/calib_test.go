package sim

import (
	"math"
	"testing"
)

const helixDir = "../testdata/sim/helix"

// TestCalibrationSingle24 replays Helix's published LLaMA-2 70B
// simulations on its 24-node cluster (its placements, streams and
// schedulers) and requires our decode throughput within ±15% of the
// figure Helix's own simulator reports.
func TestCalibrationSingle24(t *testing.T) {
	cals, err := CalibrateHelix(helixDir, "single24", "llama2_70b", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(cals) != 6 {
		t.Fatalf("got %d calibrations, want 6 (3 methods × 2 modes)", len(cals))
	}
	for _, c := range cals {
		t.Logf("%-7s %-8s published %6.1f simulated %6.1f ratio %.3f (%s)", c.Mode, c.Method, c.Published, c.Simulated, c.Ratio(), c.Source)
		if math.Abs(c.Ratio()-1) > 0.15 {
			t.Errorf("%s %s: simulated %.1f tok/s, published %.1f: off by more than 15%%", c.Mode, c.Method, c.Simulated, c.Published)
		}
	}
}

func TestTableInterpolation(t *testing.T) {
	// Worked examples from the helix README, computed with Helix's own code.
	cases := []struct {
		gpu    string
		p, d   int
		wantMS float64
	}{
		{"a100", 750, 40, 6.7},
		{"a100", 0, 1, 1.4},
		{"a100", 0, 110, 2.25},
		{"t4", 2048, 0, 132.224},
		{"l4", 800, 17, 36.65},
	}
	for _, c := range cases {
		p, err := LoadProfile(helixDir, "llama2_70b", c.gpu)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.LayerTime(c.p, c.d) * 1e3; math.Abs(got-c.wantMS) > 1e-6 {
			t.Errorf("%s P=%d D=%d: %.6f ms, want %.6f", c.gpu, c.p, c.d, got, c.wantMS)
		}
	}
}

// TestMaxflowValue checks our flow graph against the max-flow value
// Helix's MILP reports for its single24 placement (1289.56 tokens/s).
func TestMaxflowValue(t *testing.T) {
	c, typical, err := LoadHelixCluster(helixDir, "llama2_70b", "single24/llama2_70b/helix", "A100=4;L4=8;T4=12")
	if err != nil {
		t.Fatal(err)
	}
	s, err := newSim(c, nil, Window{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	_, v := newMaxflow(s, typical, 0.9, 0.6, false)
	if math.Abs(v-1289.56) > 0.6 {
		t.Fatalf("max flow %.2f, want 1289.56", v)
	}
}

func TestReplayDeterministic(t *testing.T) {
	runs, err := LoadHelixRuns(helixDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		if r.Setup == "single24" && r.Model == "llama2_70b" && r.Method == "swarm" && r.Mode == "online" {
			r.Measure = 300
			a, err := ReplayHelix(helixDir, r, 7)
			if err != nil {
				t.Fatal(err)
			}
			b, err := ReplayHelix(helixDir, r, 7)
			if err != nil {
				t.Fatal(err)
			}
			if a.Events != b.Events || a.DecodeTokS != b.DecodeTokS || a.TTFTp99 != b.TTFTp99 {
				t.Fatalf("two runs differ: %+v vs %+v", a, b)
			}
			return
		}
	}
	t.Fatal("no swarm run found")
}

// TestCalibrationGeo24 replays Helix's published LLaMA-2 70B simulations
// on its three-region cluster. Each figure is the sum of its own
// section's runs only: geo24's offline Helix and Swarm also run in §6.7
// on another layout, and counting those doubled §6.4's figures.
func TestCalibrationGeo24(t *testing.T) {
	cals, err := CalibrateHelix(helixDir, "geo24", "llama2_70b", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(cals) != 7 {
		t.Fatalf("got %d calibrations, want 7 (3 methods × 2 modes, the no-pruning ablation)", len(cals))
	}
	for _, c := range cals {
		t.Logf("%-7s %-14s published %6.1f simulated %6.1f ratio %.3f parts %d (%s)", c.Mode, c.Method, c.Published, c.Simulated, c.Ratio(), len(c.Parts), c.Source)
		want := 1
		if c.Method == "separate" {
			want = 3 // a100, l4, t4
		}
		if len(c.Parts) != want {
			t.Errorf("%s %s: %d parts, want %d", c.Mode, c.Method, len(c.Parts), want)
		}
		if math.Abs(c.Ratio()-1) > 0.15 {
			t.Errorf("%s %s: simulated %.1f tok/s, published %.1f: off by more than 15%%", c.Mode, c.Method, c.Simulated, c.Published)
		}
	}
}

// TestMaxflowDecodeLoad checks that a decode iteration charges one token
// to the round-robin load of every link on its route, as Helix's
// schedule_increment does, and nothing elsewhere.
func TestMaxflowDecodeLoad(t *testing.T) {
	c, typical, err := LoadHelixCluster(helixDir, "llama2_70b", "geo24/llama2_70b/helix", "A100=4;L4=8;T4=12")
	if err != nil {
		t.Fatal(err)
	}
	s, err := newSim(c, nil, Window{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := newMaxflow(s, typical, 0.85, 1, true)
	s.sched = m
	q := &query{input: 700, output: 3}
	if !m.admit(s, q) {
		t.Fatal("admit failed on an empty cluster")
	}
	before := append([]float64(nil), m.load...)
	m.decode(s, q)
	onRoute := map[int32]bool{}
	for _, li := range q.route {
		onRoute[li] = true
	}
	for i := range m.load {
		want := before[i]
		if onRoute[int32(i)] {
			want += 1 / m.flow[i]
		}
		if math.Abs(m.load[i]-want) > 1e-12 {
			t.Errorf("link %d: load %g, want %g (on route: %v)", i, m.load[i], want, onRoute[int32(i)])
		}
	}
	// Through the engine: a query's decodes all reach the loads.
	s2, _ := newSim(c, nil, Window{0, 100})
	m2, _ := newMaxflow(s2, typical, 0.85, 1, true)
	s2.sched = m2
	q2 := s2.issue(700, 5, 0)
	prompt := append([]float64(nil), m2.load...)
	s2.run(100)
	if !q2.done {
		t.Fatal("query did not complete")
	}
	for _, li := range q2.route {
		if got, want := m2.load[li]-prompt[li], 5/m2.flow[li]; math.Abs(got-want) > 1e-9 {
			t.Errorf("link %d: decodes added %g to the load, want %g (5 decodes)", li, got, want)
		}
	}
}
