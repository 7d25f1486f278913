package sim

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/layers/baseline"
)

// TestModelledMoEScenarios loads the two MoE scenarios and runs each, cut
// to two minutes, under every policy. DeepSeek-V3's 150 machines exhaust
// the Parallax allocator's state budget (here a small one, so that it
// does so quickly): that is its result, an error naming the budget.
func TestModelledMoEScenarios(t *testing.T) {
	for _, c := range []struct {
		file            string
		parallaxBudget  int
		parallaxNoPlace bool
	}{
		{"deepseek-v3-150.yaml", 1 << 14, true},
		{"qwen3-235b-40.yaml", 0, false},
	} {
		path := filepath.Join("..", "testdata", "sim", c.file)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		sc, err := ParseScenario(path, data)
		if err != nil {
			t.Fatal(err)
		}
		sc.StartS, sc.DurationS, sc.WarmUpS = 30, 120, 0
		spec, err := sc.SwarmSpec()
		if err != nil {
			t.Fatal(err)
		}
		spec.ParallaxMaxStates = c.parallaxBudget
		for _, pol := range Policies {
			res, err := RunSwarm(context.Background(), spec, pol)
			if pol == "parallax" && c.parallaxNoPlace {
				if !errors.Is(err, baseline.ErrTimedOut) || !strings.Contains(err.Error(), "state budget") {
					t.Errorf("%s parallax: want its state budget exhausted, got %v", c.file, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s %s: %v", c.file, pol, err)
			}
			// Two minutes hold few whole DeepSeek requests behind home
			// uplinks (TTFT alone is ~20 s): decoded tokens are the test.
			if res.DecodeTokS <= 0 {
				t.Errorf("%s %s: %d completed, %d failed, %.1f decode tok/s: served nothing", c.file, pol, res.Completed, res.Failed, res.DecodeTokS)
			}
			serving := 0
			for _, n := range res.Nodes {
				if !n.Range.Empty() {
					serving++
				}
			}
			if serving == 0 {
				t.Errorf("%s %s: no machine serving at the end", c.file, pol)
			}
		}
	}
}

// The sim's modelled layer time is the planner's cost model: the same
// roofline, so a MoE batch pays for the experts it touches.
func TestModelledTimerIsTheCostModel(t *testing.T) {
	m, err := layers.Model("deepseek-v3:q4_k_m")
	if err != nil {
		t.Fatal(err)
	}
	h, err := layers.Device("rtx4090")
	if err != nil {
		t.Fatal(err)
	}
	tm := newRooflineTimer(m, h, 1000)
	for _, b := range []int{1, 4, 16, 64} {
		if got, want := tm.LayerTime(0, b), layers.DecodeLayerTime(m, h, b, 1000); !near(got, want, 1e-12) {
			t.Errorf("b=%d: timer %.6g s, cost model %.6g s", b, got, want)
		}
	}
	if t1, t64 := tm.LayerTime(0, 1), tm.LayerTime(0, 64); t64 < 5*t1 {
		t.Errorf("batch 64 takes %.3g s against %.3g s for one token: it touches ~220 experts, not 8", t64, t1)
	}
	if tm.LayerTime(0, 0) != 0 {
		t.Errorf("an empty batch takes time")
	}
}

func near(a, b, rel float64) bool {
	d := a - b
	if d < 0 {
		d = -d
	}
	return d <= rel*max(a, b, -a, -b)
}

func TestModelledScenarioErrors(t *testing.T) {
	base := `
name: m
seed: 1
data: helix
start_s: 10
duration_s: 60
workload:
  poisson_rate_per_s: 0.1
`
	cases := map[string]string{
		"unknown gpu":   "modelled_model: {model: qwen3-30b-a3b}\nnodes:\n  - {count: 2, gpu: gtx480}\n",
		"unknown model": "modelled_model: {model: gpt-9}\nnodes:\n  - {count: 2, gpu: rtx4090}\n",
		"bad wire":      "modelled_model: {model: qwen3-30b-a3b, wire: f8}\nnodes:\n  - {count: 2, gpu: rtx4090}\n",
		"too small":     "modelled_model: {model: deepseek-v3}\nnodes:\n  - {count: 2, gpu: rtx4070}\n",
	}
	for name, body := range cases {
		sc, err := ParseScenario(filepath.Join("..", "testdata", "sim", "m.yaml"), []byte(base+body))
		if err != nil {
			t.Fatalf("%s: parse: %v", name, err)
		}
		spec, err := sc.SwarmSpec()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := RunSwarm(context.Background(), spec, "strata"); !errors.Is(err, ErrScenario) {
			t.Errorf("%s: want ErrScenario, got %v", name, err)
		}
	}
	both := base + "model: llama2_70b\nmodelled_model: {model: qwen3-30b-a3b}\nnodes:\n  - {count: 2, gpu: rtx4090}\n"
	if _, err := ParseScenario("both.yaml", []byte(both)); !errors.Is(err, ErrScenario) {
		t.Errorf("model and modelled_model: want ErrScenario, got %v", err)
	}
}
