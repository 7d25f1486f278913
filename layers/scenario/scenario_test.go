package scenario

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func shipped(t *testing.T) []*Scenario {
	t.Helper()
	files, err := filepath.Glob("../../testdata/scenarios/*.yaml")
	if err != nil || len(files) < 8 {
		t.Fatalf("shipped scenarios: %v (%d files)", err, len(files))
	}
	var out []*Scenario
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc, err := Parse(filepath.Base(f), data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, sc)
	}
	return out
}

func TestBadScenariosNameFileLineAndField(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"model: llama-3-70b\nnodes:\n  - device: rtx4090\n    count: 2\n  - device: gtx9000\n", "bad.yaml:5: field nodes[1].device"},
		{"model: llama-3-70b\nnodes:\n  - device: rtx4090\n    colour: red\n", "line 4: field colour not found"},
		{"model: gpt-9\nnodes:\n  - device: rtx4090\n", "bad.yaml:1: field model"},
		{"model: llama-3-70b\nnodes: []\n", "field nodes: no nodes"},
		{"model: llama-3-70b\nnodes:\n  - {device: rtx4090, count: -3}\n", "bad.yaml:3: field nodes[0].count"},
		{"model: llama-3-70b\nrtt_ms: {a: {a: 1}}\nnodes:\n  - {device: rtx4090, region: b}\n", "bad.yaml:4: field nodes[0].region"},
		{"model: {layers: 0, hidden: 64}\nnodes:\n  - device: rtx4090\n", "field model"},
		{"model: llama-3-70b\nnodes:\n  - {id: x, device: rtx4090}\n  - {id: x, device: rtx3090}\n", "repeats"},
		{"model: [\n", "bad.yaml"},
	}
	for _, c := range cases {
		_, err := Parse("bad.yaml", []byte(c.yaml))
		if !errors.Is(err, ErrScenario) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant ErrScenario containing %q", c.yaml, err, c.want)
		}
	}
}

func TestRandomScenariosAreSeeded(t *testing.T) {
	a, b := Random(5, 9), Random(5, 9)
	for i := range a {
		if len(a[i].Nodes) != len(b[i].Nodes) || a[i].Model.Name != b[i].Model.Name {
			t.Fatalf("scenario %d differs between runs with one seed", i)
		}
	}
	if c := Random(5, 10); c[0].Model.Name == a[0].Model.Name && len(c[0].Nodes) == len(a[0].Nodes) && c[1].Model.Name == a[1].Model.Name && len(c[1].Nodes) == len(a[1].Nodes) {
		t.Errorf("seed makes no difference")
	}
}

// TestPlannerAgainstBaselines is the planner's acceptance over the shipped
// scenarios and 50 seeded random ones: never below a baseline, the
// geometric means over the heterogeneous ones, and the distance to the
// bounds, all logged as a table.
func TestPlannerAgainstBaselines(t *testing.T) {
	scs := append(shipped(t), Random(50, 1)...)
	logs := map[string]float64{}
	counts := map[string]int{}
	var boundMisses []string
	for _, sc := range scs {
		rep, err := Run(context.Background(), sc, Options{Now: time.Now, BaselineBudget: 5 * time.Second})
		if err != nil {
			t.Fatalf("%s: %v", sc.Source, err)
		}
		ours, _ := rep.Result(Ours)
		if ours.Status != "ok" {
			t.Errorf("%s: our planner: %s %s", rep.Scenario, ours.Status, ours.Error)
			continue
		}
		line := []string{rep.Scenario}
		homogeneous := len(sc.File.Nodes) == 1 && sc.File.Nodes[0].Count > 1
		if rep.UB2 > rep.UB*(1+1e-9) {
			t.Errorf("%s: UB2 %v above UB %v", rep.Scenario, rep.UB2, rep.UB)
		}
		for _, r := range rep.Results {
			if r.Flow > rep.UB2*(1+1e-9) {
				t.Errorf("%s: %s flow %v above UB2 %v", rep.Scenario, r.Policy, r.Flow, rep.UB2)
			}
			line = append(line, fmt.Sprintf("%s=%.0f", r.Policy, r.Flow))
			if r.Policy == Ours || r.Status != "ok" {
				continue
			}
			if ours.Flow < r.Flow*(1-1e-9) {
				t.Errorf("%s: ours %.0f below %s %.0f", rep.Scenario, ours.Flow, r.Policy, r.Flow)
			}
			if !homogeneous && r.Flow > 0 {
				logs[r.Policy] += math.Log(ours.Flow / r.Flow)
				counts[r.Policy]++
			}
		}
		// The bounds: near UB where no node is a large share of a layer's
		// flow, near UB2 elsewhere.
		if rep.Nodes >= 20 {
			want, bound, name := 0.85*rep.UB2, rep.UB2, "UB2"
			if rep.UB/rep.MaxTPS >= 2 {
				want, bound, name = 0.95*rep.UB, rep.UB, "UB"
			}
			if ours.Flow < want {
				boundMisses = append(boundMisses, fmt.Sprintf("%s: %.3f·%s", rep.Scenario, ours.Flow/bound, name))
			}
		}
		t.Logf("%s  UB=%.0f UB2=%.0f UB/maxtps=%.2f flow/UB=%.3f", strings.Join(line, " "), rep.UB, rep.UB2, rep.UB/rep.MaxTPS, ours.FlowUB)
	}
	for p, n := range counts {
		g := math.Exp(logs[p] / float64(n))
		t.Logf("geometric mean ours/%s over %d heterogeneous scenarios: %.2f", p, n, g)
		want := map[string]float64{"petals": 2.0, "parallax": 1.5}[p]
		if g < want {
			t.Errorf("geometric mean ours/%s = %.2f < %.1f", p, g, want)
		}
	}
	t.Logf("scenarios short of the bound goal (%d): %s", len(boundMisses), strings.Join(boundMisses, "; "))
}
