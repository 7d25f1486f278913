package baseline

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/stratanet/strata/layers"
)

func TestWaterFillByHand(t *testing.T) {
	cases := []struct {
		name  string
		caps  []int
		power []float64
		L     int
		want  []int
	}{
		// λ = 12/175: targets 6.86, 3.43, 1.71; floors 6, 3, 1 leave 2,
		// which go to the fractions .86 and .71.
		{"uncapped", []int{10, 6, 4}, []float64{100, 50, 25}, 12, []int{7, 3, 2}},
		// The first stage caps at 5; the rest share 7: λ = 7/75, targets
		// 5, 4.67, 2.33; floors 5, 4, 2 leave 1, which goes to .67.
		{"capped", []int{5, 6, 4}, []float64{100, 50, 25}, 12, []int{5, 5, 2}},
		// Equal fractions: the earlier stage gets the layer.
		{"tie", []int{10, 10}, []float64{1, 1}, 5, []int{3, 2}},
		// docs/baselines.md: with Parallax's table an A100 (312) gets about 3×
		// the layers of an RTX 5090 (104.8): λ = 32/416.8, targets 23.95
		// and 8.05, floors 23 and 8, the last layer to .95.
		{"a100 vs 5090", []int{128, 100}, []float64{312, 104.8}, 32, []int{24, 8}},
		{"exact", []int{4, 4}, []float64{1, 1}, 8, []int{4, 4}},
	}
	for _, c := range cases {
		got, err := WaterFill(c.caps, c.power, c.L)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	for _, c := range []struct {
		caps  []int
		power []float64
		L     int
	}{
		{[]int{0, 5}, []float64{1, 1}, 4},
		{[]int{2, 2}, []float64{1, 1}, 5},
		{[]int{3, 3}, []float64{1, 0}, 4},
		{nil, nil, 4},
	} {
		if _, err := WaterFill(c.caps, c.power, c.L); err == nil {
			t.Errorf("WaterFill(%v, %v, %d): no error", c.caps, c.power, c.L)
		}
	}
}

// Parallax's own example (layer_allocation.py): capacities 40, 40, 20,
// 20, 10, 10 and 70 layers. One pipeline takes 2 stages (40 + 40);
// two take 6, (40, 20, 10) twice. Z(1) = 1/2 < Z(2) = 4/6.
func TestParallaxSearchByHand(t *testing.T) {
	caps := []int{40, 40, 20, 20, 10, 10}
	d := &pxDP{ctx: context.Background(), L: 70, n: len(caps), maxStates: 1 << 20}
	d.cap, d.capE, d.capH = caps, caps, caps
	d.suffix = make([]int, len(caps)+1)
	for i := len(caps) - 1; i >= 0; i-- {
		d.suffix[i] = d.suffix[i+1] + caps[i]
	}
	for _, c := range []struct{ k, want int }{{1, 2}, {2, 6}} {
		s, err := d.run(c.k)
		if err != nil || s != c.want {
			t.Errorf("s*(%d) = %d, %v; want %d", c.k, s, err, c.want)
		}
	}
	// Node 0 opens, node 1 opens the second pipeline (joining would
	// close one with nothing left for the other), node 2 joins the
	// oldest of the two equal residuals, node 3 the other, and the 10s
	// close them.
	pipes, err := d.backtrack(2)
	if err != nil {
		t.Fatal(err)
	}
	if len(pipes) != 2 || !slices.Equal(pipes[0], []int{0, 2, 4}) || !slices.Equal(pipes[1], []int{1, 3, 5}) {
		t.Errorf("pipelines %v, want [[0 2 4] [1 3 5]]", pipes)
	}
}

// Capacities by hand for Llama-3-70B (1,711,308,800 B a layer, and
// 2,101,346,304 B of embedding): an RTX 4090 has ⌊0.65·24 GiB⌋ =
// 16,750,372,454 B for weights: 9.79 → 9 layers, 8.56 → 8 beside the
// embedding; an A100-80G 55,834,574,848 B: 32.6 → 32, 31.4 → 31.
func TestParallaxCapacityByHand(t *testing.T) {
	f := fleetOf(t, "llama-3-70b", example(t))
	for _, c := range []struct {
		id            string
		plain, embed  int
		head, maxLyrs int
	}{
		{"rtx4090-0", 9, 8, 8, 0},
		{"a100-80g-0", 32, 31, 31, 0},
		{"a100-80g-1", 20, 20, 20, 20},
	} {
		p, _ := f.Profile(c.id)
		n := p.Node
		n.MaxLayers = c.maxLyrs
		got := []int{ParallaxCapacity(f.Model, n, DefaultParallaxParamRatio, 0),
			ParallaxCapacity(f.Model, n, DefaultParallaxParamRatio, layers.EndEmbed),
			ParallaxCapacity(f.Model, n, DefaultParallaxParamRatio, layers.EndHead)}
		if want := []int{c.plain, c.embed, c.head}; !slices.Equal(got, want) {
			t.Errorf("%s (max %d): %v, want %v", c.id, c.maxLyrs, got, want)
		}
	}
}

// The brief's fleet. Capacities: 2 A100s 32 (31 at an end), 12 consumer
// GPUs 9 (8 at an end), taken A100s first, then in ID order. One
// pipeline needs 4 stages (31 + 32 + 9 + 8); two need 14 (all 14
// nodes), and Z(2) = 4/14 > Z(1) = 1/4; three exceed 172 layers of
// capacity. Water-filling by datasheet TFLOPS:
//   - a100, a100, 3090, 3090 with caps 31, 32, 9, 8 and TFLOPS 312, 312,
//     71, 71: the A100s and then the last 3090 hit their caps; 31, 32, 9, 8.
//   - 3090, 3090, eight 4090s with caps 8, 9, 9×6, 8: every 4090 (165.2)
//     caps, leaving 9 layers for the two 3090s at 4.5 each: 5 and 4 (the
//     tie goes to the first).
//
// With Parallax's table the 3090s count 50 and the 4090s 82.6: λ solves
// 100λ + 7·82.6λ + 8 = 80, so the 3090s get 5.31 and the 4090s 8.77;
// floors leave 6 layers for the six first 4090s (fractions .77 > .31).
func TestParallaxExampleByHand(t *testing.T) {
	f := fleetOf(t, "llama-3-70b", example(t))
	r := func(s, e int) layers.Range { return layers.Range{Start: s, End: e} }
	pipe1 := map[string]layers.Range{"a100-80g-0": r(0, 31), "a100-80g-1": r(31, 63), "rtx3090-0": r(63, 72), "rtx3090-1": r(72, 80)}
	for _, c := range []struct {
		table bool
		want  map[string]layers.Range
	}{
		{false, map[string]layers.Range{"rtx3090-2": r(0, 5), "rtx3090-3": r(5, 9), "rtx4090-0": r(9, 18), "rtx4090-1": r(18, 27),
			"rtx4090-2": r(27, 36), "rtx4090-3": r(36, 45), "rtx4090-4": r(45, 54), "rtx4090-5": r(54, 63), "rtx4090-6": r(63, 72), "rtx4090-7": r(72, 80)}},
		{true, map[string]layers.Range{"rtx3090-2": r(0, 5), "rtx3090-3": r(5, 10), "rtx4090-0": r(10, 19), "rtx4090-1": r(19, 28),
			"rtx4090-2": r(28, 37), "rtx4090-3": r(37, 46), "rtx4090-4": r(46, 55), "rtx4090-5": r(55, 64), "rtx4090-6": r(64, 72), "rtx4090-7": r(72, 80)}},
	} {
		res, err := NewParallax(ParallaxDeviceTable(c.table)).Run(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		if res.K != 2 || res.Stages != 14 || len(res.Unused) != 0 {
			t.Errorf("table=%v: k=%d s=%d unused %v", c.table, res.K, res.Stages, res.Unused)
		}
		got := stagesOf(res.Map)
		for id, want := range pipe1 {
			if got[id] != want {
				t.Errorf("table=%v: %s %v, want %v", c.table, id, got[id], want)
			}
		}
		for id, want := range c.want {
			if got[id] != want {
				t.Errorf("table=%v: %s %v, want %v", c.table, id, got[id], want)
			}
		}
		if want := []string{"a100-80g-0", "a100-80g-1", "rtx3090-0", "rtx3090-1"}; !slices.Equal(res.Pipelines[0], want) {
			t.Errorf("table=%v: first pipeline %v, want %v", c.table, res.Pipelines[0], want)
		}
		checkMap(t, f, res.Map)
	}
}

// Ties in capacity keep the join order, so it decides the pipelines.
func TestParallaxJoinOrder(t *testing.T) {
	f := fleetOf(t, "llama-3-70b", example(t))
	var ids []string
	for i := range 8 {
		ids = append(ids, fmt.Sprintf("rtx4090-%d", i))
	}
	res, err := NewParallax(ParallaxJoinOrder(ids...)).Run(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a100-80g-0", "a100-80g-1", "rtx4090-0", "rtx4090-1"}; !slices.Equal(res.Pipelines[0], want) {
		t.Errorf("first pipeline %v, want %v", res.Pipelines[0], want)
	}
}

// Four A100s on 70B: one pipeline of three (31 + 32 + 17 beside the
// head) and 128 < 160 layers rule out two. Skipping is tried first and
// wins ties, so the first node is the one left out.
func TestParallaxUnused(t *testing.T) {
	f := fleetOf(t, "llama-3-70b", nodesOf(t, group{"a100-80g", 4}))
	res, err := NewParallax().Run(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	if res.K != 1 || res.Stages != 3 || !slices.Equal(res.Unused, []string{"a100-80g-0"}) {
		t.Errorf("k=%d s=%d unused %v", res.K, res.Stages, res.Unused)
	}
	if !res.Map.Covers() || len(res.Map.Stages) != 3 {
		t.Errorf("map %v", res.Map.Stages)
	}
}

func TestParallaxTFLOPS(t *testing.T) {
	for name, want := range map[string]float64{
		"a100-80g": 312, "A100-40G": 312, "rtx5090": 104.8, "NVIDIA GeForce RTX 4090": 82.6,
		"rtx3090": 50, "h100": 50, "l40s": 50, "m2-ultra": 53.96, "Apple M3 Max": 28.4, "m3": 7.1,
	} {
		if got := ParallaxTFLOPS(name); got != want {
			t.Errorf("%q: %v, want %v", name, got, want)
		}
	}
}
