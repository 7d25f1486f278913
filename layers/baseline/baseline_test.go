package baseline

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stratanet/strata/layers"
)

// group is count nodes of one device.
type group struct {
	dev   string
	count int
}

func nodesOf(t testing.TB, groups ...group) []layers.Node {
	t.Helper()
	var nodes []layers.Node
	for _, g := range groups {
		hw, err := layers.Device(g.dev)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < g.count; i++ {
			nodes = append(nodes, layers.Node{ID: fmt.Sprintf("%s-%d", g.dev, i), Hardware: hw})
		}
	}
	return nodes
}

func fleetOf(t testing.TB, model string, nodes []layers.Node) *layers.Fleet {
	t.Helper()
	m, err := layers.Model(model)
	if err != nil {
		t.Fatal(err)
	}
	f, err := layers.NewFleet(m, nodes, layers.DefaultCostParams())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// mixed is a deterministic fleet of n nodes cycling through devs.
func mixed(t testing.TB, model string, n int, devs ...string) *layers.Fleet {
	t.Helper()
	var nodes []layers.Node
	for i := 0; i < n; i++ {
		d := devs[(i*7+i/3)%len(devs)]
		hw, err := layers.Device(d)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, layers.Node{ID: fmt.Sprintf("n%04d-%s", i, d), Hardware: hw})
	}
	return fleetOf(t, model, nodes)
}

// example is the brief's fleet: 8×RTX 4090, 4×RTX 3090, 2×A100-80G.
func example(t testing.TB) []layers.Node {
	return nodesOf(t, group{"rtx4090", 8}, group{"rtx3090", 4}, group{"a100-80g", 2})
}

// smallFleets are fleets that both policies finish quickly.
func smallFleets(t testing.TB) map[string]*layers.Fleet {
	return map[string]*layers.Fleet{
		"example-70b":   fleetOf(t, "llama-3-70b", example(t)),
		"4090x20-70b":   fleetOf(t, "llama-3-70b", nodesOf(t, group{"rtx4090", 20})),
		"mix-8b":        fleetOf(t, "llama-3-8b", nodesOf(t, group{"rtx4070", 3}, group{"t4", 3}, group{"rtx3090", 2})),
		"mix-qwen72-q8": fleetOf(t, "qwen2.5-72b:q8_0", nodesOf(t, group{"rtx4090", 4}, group{"l40s", 2}, group{"m3-max", 1})),
		"mixtral":       fleetOf(t, "mixtral-8x7b", nodesOf(t, group{"rtx4090", 3}, group{"a100-40g", 2})),
		"405b":          fleetOf(t, "llama-3.1-405b", nodesOf(t, group{"h100", 10}, group{"a100-80g", 8})),
	}
}

// checkMap checks what every baseline map must satisfy: valid, only
// fleet nodes, every stage with positive throughput under the cost model,
// and the quality bounds Flow ≤ UB2 ≤ UB.
func checkMap(t *testing.T, f *layers.Fleet, m layers.LayerMap) {
	t.Helper()
	if err := m.Validate(); err != nil {
		t.Fatalf("invalid map: %v", err)
	}
	if m.Layers != f.Model.Layers {
		t.Fatalf("map has %d layers, model %d", m.Layers, f.Model.Layers)
	}
	for _, s := range m.Stages {
		if f.Index(s.Node) < 0 {
			t.Fatalf("stage for unknown node %q", s.Node)
		}
		if !(f.StageTPS(s) > 0) {
			t.Errorf("stage %s %v does not fit the node (TPS 0)", s.Node, s.Range)
		}
	}
	flow, ub, ub2 := f.Flow(m), f.UB(), f.UB2()
	if flow > ub2*(1+1e-9) || ub2 > ub*(1+1e-9) {
		t.Errorf("bounds broken: flow %v, UB2 %v, UB %v", flow, ub2, ub)
	}
}

func TestPoliciesOnSmallFleets(t *testing.T) {
	for name, f := range smallFleets(t) {
		for _, p := range Defaults() {
			t.Run(name+"/"+p.Name(), func(t *testing.T) {
				m, err := p.Plan(context.Background(), f)
				if err != nil {
					t.Fatal(err)
				}
				checkMap(t, f, m)
				// Every fleet here offers at least twice the model's layers.
				if !m.Covers() {
					t.Errorf("no coverage: gaps %v", m.Gaps())
				}
				if f.Flow(m) <= 0 {
					t.Errorf("flow %v", f.Flow(m))
				}
			})
		}
	}
}

// The same nodes listed in any order give the same map.
func TestDeterministicUnderPermutation(t *testing.T) {
	m, _ := layers.Model("llama-3-70b")
	base := nodesOf(t, group{"rtx4090", 6}, group{"rtx3090", 3}, group{"a100-80g", 2}, group{"l40s", 2}, group{"rtx4070", 3})
	rng := rand.New(rand.NewPCG(1, 2))
	for _, p := range Defaults() {
		var want layers.LayerMap
		for trial := range 5 {
			nodes := append([]layers.Node(nil), base...)
			rng.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
			f, err := layers.NewFleet(m, nodes, layers.DefaultCostParams())
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.Plan(context.Background(), f)
			if err != nil {
				t.Fatalf("%s: %v", p.Name(), err)
			}
			if trial == 0 {
				want = got
			} else if !got.Equal(want) {
				t.Fatalf("%s: permutation %d changed the map:\n%v\nvs\n%v", p.Name(), trial, got.Stages, want.Stages)
			}
		}
	}
}

func TestTimedOutOnCancelledContext(t *testing.T) {
	f := mixed(t, "llama-3-70b", 1000, "rtx4090", "rtx3090", "a100-80g", "rtx4070")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, p := range Defaults() {
		_, err := p.Plan(ctx, f)
		if !errors.Is(err, ErrTimedOut) || !errors.Is(err, context.Canceled) {
			t.Errorf("%s: err = %v, want ErrTimedOut wrapping context.Canceled", p.Name(), err)
		}
	}
}

// countdown is a context whose Err turns into DeadlineExceeded after a
// number of polls: a deadline in the middle of a search, without a clock.
type countdown struct {
	context.Context
	left int
}

func (c *countdown) Err() error {
	if c.left--; c.left < 0 {
		return context.DeadlineExceeded
	}
	return nil
}

// A deadline in the middle of a search is noticed, and nothing is
// returned but the timeout.
func TestDeadlineMidSearch(t *testing.T) {
	f := mixed(t, "llama-3-70b", 100, "rtx4090", "rtx3090", "a100-80g", "l40s", "rtx4070")
	for _, p := range Defaults() {
		ctx := &countdown{Context: context.Background(), left: 20}
		m, err := p.Plan(ctx, f)
		if !errors.Is(err, ErrTimedOut) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: err = %v", p.Name(), err)
		}
		if len(m.Stages) != 0 {
			t.Errorf("%s: a map with a timeout", p.Name())
		}
	}
}

func TestParallaxStateBudget(t *testing.T) {
	f := mixed(t, "llama-3-70b", 100, "rtx4090", "rtx3090", "a100-80g")
	_, err := NewParallax(ParallaxMaxStates(10000)).Plan(context.Background(), f)
	if !errors.Is(err, ErrTimedOut) || !errors.Is(err, errStateBudget) {
		t.Fatalf("err = %v, want ErrTimedOut from the state budget", err)
	}
}

func TestDegenerateInputs(t *testing.T) {
	ctx := context.Background()
	m70, _ := layers.Model("llama-3-70b")
	empty, err := layers.NewFleet(m70, nil, layers.DefaultCostParams())
	if err != nil {
		t.Fatal(err)
	}
	tiny := layers.Hardware{Name: "tiny", MemoryBytes: 1 << 30, MemBandwidth: 100 * layers.GB, TFLOPS: 10}
	small, err := layers.NewFleet(m70, []layers.Node{{ID: "a", Hardware: tiny}, {ID: "b", Hardware: tiny}}, layers.DefaultCostParams())
	if err != nil {
		t.Fatal(err)
	}
	// A fleet built by hand can hold a zero-memory node that NewFleet
	// would refuse; its profile is empty.
	zero := layers.Node{ID: "z", Hardware: layers.Hardware{Name: "zero"}}
	handmade := &layers.Fleet{Model: m70, Params: layers.DefaultCostParams(),
		Profiles: []layers.Profile{layers.NewProfile(m70, zero, layers.DefaultCostParams())}}
	cases := []struct {
		name string
		f    *layers.Fleet
		want error
	}{
		{"nil", nil, ErrNoNodes},
		{"empty", empty, ErrNoNodes},
		{"too small", small, ErrNoCapacity},
		{"zero memory", handmade, ErrNoCapacity},
	}
	for _, c := range cases {
		for _, p := range Defaults() {
			m, err := p.Plan(ctx, c.f)
			if !errors.Is(err, c.want) {
				t.Errorf("%s/%s: err = %v, want %v", c.name, p.Name(), err, c.want)
			}
			if len(m.Stages) != 0 {
				t.Errorf("%s/%s: a map with an error: %v", c.name, p.Name(), m.Stages)
			}
		}
	}

	// A one-layer model: every node can hold it; both cover it.
	one, err := layers.NewModelSpec(layers.HyperParams{Name: "one", Layers: 1, Hidden: 512, Heads: 8, KVHeads: 8,
		FFN: 1024, Vocab: 1000, BytesPerParam: 2})
	if err != nil {
		t.Fatal(err)
	}
	f1, err := layers.NewFleet(one, nodesOf(t, group{"rtx4070", 3}), layers.DefaultCostParams())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range Defaults() {
		m, err := p.Plan(ctx, f1)
		if err != nil {
			t.Fatalf("one layer/%s: %v", p.Name(), err)
		}
		checkMap(t, f1, m)
		if !m.Covers() {
			t.Errorf("one layer/%s: no coverage", p.Name())
		}
	}
}

func TestBadOptions(t *testing.T) {
	ctx := context.Background()
	f := fleetOf(t, "llama-3-70b", example(t))
	bad := []Policy{
		NewPetals(PetalsCacheTokens(-1)),
		NewPetals(PetalsReserve(-1)),
		NewPetals(PetalsBalanceQuality(0)),
		NewPetals(PetalsEpsilon(0.5)),
		NewPetals(PetalsMaxRounds(0)),
		NewPetals(PetalsJoinOrder("nobody")),
		NewPetals(PetalsJoinOrder("rtx4090-0", "rtx4090-0")),
		NewParallax(ParallaxParamRatio(1.5)),
		NewParallax(ParallaxMaxStates(0)),
		NewParallax(ParallaxJoinOrder("nobody")),
	}
	for i, p := range bad {
		if _, err := p.Plan(ctx, f); !errors.Is(err, ErrBadOption) {
			t.Errorf("case %d (%s): err = %v, want ErrBadOption", i, p.Name(), err)
		}
	}
}
