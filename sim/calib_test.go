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
