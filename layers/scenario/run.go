package scenario

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/layers/baseline"
)

// Result is one policy's plan for a scenario, scored.
type Result struct {
	Policy  string           `json:"policy"`
	Status  string           `json:"status"` // ok, timed out, no coverage, error
	Error   string           `json:"error,omitempty"`
	Note    string           `json:"note,omitempty"`
	Map     layers.LayerMap  `json:"map"`
	Flow    float64          `json:"flow_tps"`
	FlowUB  float64          `json:"flow_over_ub"`
	FlowUB2 float64          `json:"flow_over_ub2"`
	Latency float64          `json:"best_path_latency_s"`
	Time    time.Duration    `json:"plan_time_ns"`
	Stages  StagesSummary    `json:"stages"`
	Extra   map[string]int64 `json:"extra,omitempty"`
}

// StagesSummary describes a map's shape.
type StagesSummary struct {
	Nodes       int     `json:"nodes"`
	MinLayers   int     `json:"min_layers"`
	MaxLayers   int     `json:"max_layers"`
	MeanLayers  float64 `json:"mean_layers"`
	Replication int     `json:"replication"`
	PathHops    int     `json:"path_hops"` // hops of the fewest-hop path
}

// Report is every policy's result on one scenario.
type Report struct {
	Scenario string  `json:"scenario"`
	Model    string  `json:"model"`
	Nodes    int     `json:"nodes"`
	UB       float64 `json:"ub_tps"`
	UB2      float64 `json:"ub2_tps"`
	MaxTPS   float64 `json:"max_node_tps"` // maxᵢ tpsᵢ(k*ᵢ)
	// Needs is, per hardware kind, the fewest nodes of that kind alone
	// that hold the model once; MinNodes the fewest of this fleet.
	Needs    []layers.KindNeed `json:"needs"`
	MinNodes int               `json:"min_nodes"`
	// WeightBytes is the model's weights (every expert), ActiveParams
	// the parameters one token uses.
	WeightBytes  float64  `json:"weight_bytes"`
	ActiveParams float64  `json:"active_params"`
	Results      []Result `json:"results"`
}

// Result returns the named policy's result.
func (r Report) Result(policy string) (Result, bool) {
	for _, x := range r.Results {
		if x.Policy == policy {
			return x, true
		}
	}
	return Result{}, false
}

// Ours is our planner's name in reports.
const Ours = "strata"

// Options configure Run.
type Options struct {
	// Now reads the clock for planning times; nil: times are not taken.
	Now func() time.Time
	// BaselineBudget bounds each baseline (default 60 s, enforced through
	// the context, so that a slow baseline is reported as timed out).
	BaselineBudget time.Duration
	// NoSeeds stops our planner from starting from the baselines' plans.
	NoSeeds bool
	// Planner options beyond the scenario's own.
	PlannerOptions []layers.Option
}

// Run plans the scenario with both baselines and then our planner (seeded
// with the baselines' plans unless told otherwise) and scores them alike.
func Run(ctx context.Context, sc *Scenario, o Options) (Report, error) {
	f, err := sc.Fleet()
	if err != nil {
		return Report{}, fmt.Errorf("%s: %w", sc.Source, err)
	}
	if o.BaselineBudget <= 0 {
		o.BaselineBudget = 60 * time.Second
	}
	rep := Report{Scenario: sc.File.Name, Model: sc.Model.Name, Nodes: f.Len(), UB: f.UB(), UB2: f.UB2(),
		Needs: f.Needs(), MinNodes: f.MinNodes(), WeightBytes: sc.Model.TotalParams() * sc.Model.BytesPerParam,
		ActiveParams: sc.Model.ActiveParams()}
	for _, p := range f.Profiles {
		rep.MaxTPS = math.Max(rep.MaxTPS, p.TPS(p.BestK(), 0))
	}
	since := func() func() time.Duration {
		if o.Now == nil {
			return func() time.Duration { return 0 }
		}
		t0 := o.Now()
		return func() time.Duration { return o.Now().Sub(t0) }
	}
	var seeds []layers.LayerMap
	for _, pol := range []baseline.Policy{baseline.NewPetals(), baseline.NewParallax()} {
		bctx, cancel := context.WithTimeout(ctx, o.BaselineBudget)
		elapsed := since()
		m, err := pol.Plan(bctx, f)
		d := elapsed()
		cancel()
		res := score(f, sc.RTT, pol.Name(), m, err)
		res.Time = d
		if res.Status == "ok" || res.Status == "no coverage" {
			seeds = append(seeds, m)
		}
		rep.Results = append(rep.Results, res)
	}
	opts := []layers.Option{layers.WithRTT(sc.RTT)}
	if sc.File.Replication > 0 {
		opts = append(opts, layers.WithReplication(sc.File.Replication))
	}
	if sc.File.LatencyTargetMS > 0 {
		opts = append(opts, layers.WithLatencyTarget(sc.File.LatencyTargetMS/1000))
	}
	if !o.NoSeeds {
		opts = append(opts, layers.WithSeeds(seeds...))
	}
	opts = append(opts, o.PlannerOptions...)
	elapsed := since()
	plan, err := layers.NewPlanner(opts...).Full(f, 1)
	d := elapsed()
	res := score(f, sc.RTT, Ours, plan.Map, err)
	res.Time, res.Note = d, plan.Note
	rep.Results = append(rep.Results, res)
	return rep, nil
}

func score(f *layers.Fleet, rtt layers.RTT, name string, m layers.LayerMap, err error) Result {
	res := Result{Policy: name, Status: "ok", Map: m}
	switch {
	case errors.Is(err, baseline.ErrTimedOut):
		res.Status, res.Error = "timed out", err.Error()
		return res
	case errors.Is(err, layers.ErrNoCoverage):
		res.Status, res.Error = "no coverage", err.Error()
	case err != nil:
		res.Status, res.Error = "error", err.Error()
		return res
	}
	res.Flow = f.Flow(m)
	if ub := f.UB(); ub > 0 {
		res.FlowUB = res.Flow / ub
	}
	if ub2 := f.UB2(); ub2 > 0 {
		res.FlowUB2 = res.Flow / ub2
	}
	res.Latency = f.PathLatency(m, rtt)
	res.Stages = summarize(m)
	return res
}

func summarize(m layers.LayerMap) StagesSummary {
	s := StagesSummary{Nodes: len(m.Stages), MinLayers: math.MaxInt, Replication: m.Replication()}
	total := 0
	for _, st := range m.Stages {
		s.MinLayers = min(s.MinLayers, st.Len())
		s.MaxLayers = max(s.MaxLayers, st.Len())
		total += st.Len()
	}
	if len(m.Stages) == 0 {
		s.MinLayers = 0
	} else {
		s.MeanLayers = float64(total) / float64(len(m.Stages))
	}
	s.PathHops = fewestHops(m)
	return s
}

// fewestHops is the least number of hops of any path over [0, L): the
// greedy furthest-reach jump is optimal for interval covering.
func fewestHops(m layers.LayerMap) int {
	reach, hops := 0, 0
	for reach < m.Layers {
		next := reach
		for _, s := range m.Stages {
			if s.Start <= reach && s.End > next {
				next = s.End
			}
		}
		if next == reach {
			return 0 // a gap
		}
		reach, hops = next, hops+1
	}
	return hops
}

// Random generates n seeded heterogeneous scenarios: a built-in model and
// a mix of devices with enough memory to cover it about twice.
func Random(n int, seed uint64) []*Scenario {
	rng := rand.New(rand.NewPCG(seed, 0x5374726174610a))
	models := []string{"llama-3-8b", "llama-3-70b", "qwen2.5-72b", "mixtral-8x7b", "llama-3-70b:q8_0", "qwen2.5-7b"}
	devices := layers.DeviceNames()
	out := make([]*Scenario, 0, n)
	for i := 0; i < n; i++ {
		f := File{Name: fmt.Sprintf("random-%d-%d", seed, i), Model: ModelRef{Builtin: models[rng.IntN(len(models))]}}
		m, _ := layers.Model(f.Model.Builtin)
		kinds := 2 + rng.IntN(4)
		target := (1.5 + 2.5*rng.Float64()) * float64(m.Layers) // layers of capacity to offer
		have := 0.0
		for have < target && len(f.Nodes) < 400 {
			d := devices[rng.IntN(len(devices))]
			if len(f.Nodes) >= kinds {
				d = f.Nodes[rng.IntN(kinds)].Device
			}
			hw, _ := layers.Device(d)
			p := layers.NewProfile(m, layers.Node{ID: "x", Hardware: hw}, layers.DefaultCostParams())
			if p.MaxLayers == 0 {
				continue
			}
			c := 1 + rng.IntN(4)
			f.Nodes = append(f.Nodes, NodeGroup{ID: fmt.Sprintf("%s-g%d", d, len(f.Nodes)), Device: d, Count: c})
			have += float64(c * p.MaxLayers)
		}
		sc, err := build(f.Name, f)
		if err != nil {
			panic(fmt.Sprintf("scenario: generated scenario is invalid: %v", err)) // a bug in Random
		}
		out = append(out, sc)
	}
	return out
}
