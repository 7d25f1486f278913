package layers

import (
	"errors"
	"math"
	"testing"
)

// The published parameter counts are the oracle: the models' own
// cards, not anything computed here.
func TestMoEParamCountsMatchPublished(t *testing.T) {
	cases := []struct {
		name          string
		total, active float64 // billions, as published
		withEmbedding bool    // the publisher counts the embedding as active
		tolActive     float64
	}{
		// DeepSeek-V3 README_WEIGHTS.md: main model 671B, 36.6B activated
		// including the 0.9B output head (the MTP module is apart).
		{"deepseek-v3", 671, 36.6, false, 0.005},
		// Qwen3 model cards: 235B total, 22B activated; 30.5B, 3.3B.
		{"qwen3-235b-a22b", 235, 22, true, 0.03},
		{"qwen3-30b-a3b", 30.5, 3.3, true, 0.03},
		// Mixtral of experts paper: 46.7B total, 12.9B active.
		{"mixtral-8x7b", 46.7, 12.9, true, 0.01},
	}
	for _, c := range cases {
		m, err := Model(c.name)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.TotalParams() / 1e9; !near(got, c.total, 0.005) {
			t.Errorf("%s: total %.2fB, published %.1fB", c.name, got, c.total)
		}
		active := m.ActiveParams()
		if c.withEmbedding {
			active += float64(m.Vocab * m.Hidden)
		}
		if got := active / 1e9; !near(got, c.active, c.tolActive) {
			t.Errorf("%s: active %.2fB, published %.1fB", c.name, got, c.active)
		}
	}
}

func TestMoEMemoryCountsEveryExpertComputeTheActive(t *testing.T) {
	m, err := Model("deepseek-v3:q4_k_m")
	if err != nil {
		t.Fatal(err)
	}
	// Memory: 257 experts (256 routed, 1 shared) of 3·7168·2048 each.
	if experts := 257 * 3 * 7168 * 2048.0; m.LayerParams() < experts || m.LayerParams() > experts*1.03 {
		t.Errorf("LayerParams %.4g, want every expert (%.4g) and a little attention", m.LayerParams(), experts)
	}
	// The first three layers are dense (FFN 18432) and much smaller.
	if d, e := m.LayerParamsAt(0), m.LayerParamsAt(3); d >= e/10 || m.LayerParamsAt(2) != d || m.LayerParamsAt(60) != e {
		t.Errorf("dense layer %.4g, MoE layer %.4g", d, e)
	}
	// Compute: 8 routed + 1 shared expert per token.
	active := 9 * 3 * 7168 * 2048.0
	if f := m.FLOPsPerToken(0); f < 2*active || f > 2*active*1.6 {
		t.Errorf("FLOPsPerToken %.4g, want about 2×%.4g plus attention", f, active)
	}
	// Latent attention caches kv_lora_rank + rope dim per token and layer.
	if got := m.KVBytesPerToken(); got != (512+64)*2 {
		t.Errorf("KVBytesPerToken %v, want 1152 (576 fp16 elements)", got)
	}
	q, _ := Model("qwen3-235b-a22b")
	if got := q.KVBytesPerToken(); got != 2*4*128*2 {
		t.Errorf("qwen3 KVBytesPerToken %v, want 2·4 heads·128·2 bytes", got)
	}
	if q.HeadDim() != 128 {
		t.Errorf("qwen3 head dim %d, want 128 (its own, not 4096/64)", q.HeadDim())
	}
}

// exactTouched enumerates every choice of k of E experts for each of b
// tokens and averages the size of their union: the oracle for
// TouchedExperts' closed form.
func exactTouched(E, k, b int) float64 {
	var subsets []uint
	for s := uint(0); s < 1<<E; s++ {
		if popcount(s) == k {
			subsets = append(subsets, s)
		}
	}
	sum, n := 0.0, 0
	var rec func(depth int, acc uint)
	rec = func(depth int, acc uint) {
		if depth == b {
			sum += float64(popcount(acc))
			n++
			return
		}
		for _, s := range subsets {
			rec(depth+1, acc|s)
		}
	}
	rec(0, 0)
	return sum / float64(n)
}

func popcount(x uint) int {
	c := 0
	for ; x != 0; x &= x - 1 {
		c++
	}
	return c
}

func TestTouchedExpertsMatchesEnumeration(t *testing.T) {
	for _, c := range []struct{ E, k, b int }{{4, 2, 2}, {6, 2, 3}, {8, 2, 4}, {7, 3, 2}, {5, 1, 5}} {
		m, err := NewModelSpec(HyperParams{Layers: 2, Hidden: 64, Heads: 4, FFN: 128, Vocab: 256,
			Experts: c.E, ActiveExperts: c.k, BytesPerParam: 2})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := m.TouchedExperts(c.b), exactTouched(c.E, c.k, c.b); math.Abs(got-want) > 1e-9 {
			t.Errorf("E=%d k=%d b=%d: TouchedExperts %v, enumeration %v", c.E, c.k, c.b, got, want)
		}
	}
}

func TestMoEBatchReadsGrowWithTouchedExperts(t *testing.T) {
	m, _ := Model("deepseek-v3:q4_k_m")
	h, _ := Device("rtx4090")
	prev := 0.0
	for _, b := range []int{1, 2, 8, 32, 128, 512} {
		r := m.LayerReadBytesBatch(b)
		if r <= prev && b <= 128 {
			t.Errorf("b=%d: read %.4g does not grow (was %.4g)", b, r, prev)
		}
		if r > m.LayerWeightBytes()*(1+1e-12) {
			t.Errorf("b=%d: read %.4g beyond the layer's %.4g", b, r, m.LayerWeightBytes())
		}
		prev = r
	}
	// One token reads its 8 experts and the shared one, not 257.
	if r1 := m.LayerReadBytesBatch(1); r1 > m.LayerWeightBytes()/10 {
		t.Errorf("one token reads %.4g of a %.4g layer", r1, m.LayerWeightBytes())
	}
	// A batch of 512 touches all but a few of 256 experts.
	if tb := m.TouchedExperts(512); tb < 255.9 || tb > 256 {
		t.Errorf("TouchedExperts(512) = %v", tb)
	}
	// So a memory-bound decode step is far cheaper at batch 1 than 64.
	if t1, t64 := DecodeLayerTime(m, h, 1, 2048), DecodeLayerTime(m, h, 64, 2048); t64 < 5*t1 {
		t.Errorf("decode step b=1 %.3g s, b=64 %.3g s: want the batch to touch more experts", t1, t64)
	}
	// A dense model reads the whole layer at any batch.
	d, _ := Model("llama-3-8b")
	if d.LayerReadBytesBatch(1) != d.LayerWeightBytes() {
		t.Errorf("dense model: batch read %v != layer %v", d.LayerReadBytesBatch(1), d.LayerWeightBytes())
	}
}

func TestMoEBadSpecs(t *testing.T) {
	bad := []HyperParams{
		{Name: "dense-with-shared", Layers: 2, Hidden: 64, Heads: 4, FFN: 128, Vocab: 256, SharedExperts: 1, BytesPerParam: 2},
		{Name: "dense-layers-dense", Layers: 2, Hidden: 64, Heads: 4, FFN: 128, Vocab: 256, DenseLayers: 1, BytesPerParam: 2},
		{Name: "all-dense", Layers: 2, Hidden: 64, Heads: 4, FFN: 128, Vocab: 256, Experts: 4, DenseLayers: 2, BytesPerParam: 2},
		{Name: "mla-no-rank", Layers: 2, Hidden: 64, Heads: 4, FFN: 128, Vocab: 256, RopeHeadDim: 16, BytesPerParam: 2},
		{Name: "neg-head", Layers: 2, Hidden: 64, Heads: 4, HeadDim: -1, FFN: 128, Vocab: 256, BytesPerParam: 2},
	}
	for _, h := range bad {
		if _, err := NewModelSpec(h); !errors.Is(err, ErrBadSpec) {
			t.Errorf("%s: want ErrBadSpec, got %v", h.Name, err)
		}
	}
}

// The fewest volunteers of one kind, checked against the real planner:
// that many cover the model, one fewer do not.
func TestMinNodesAgainstPlanner(t *testing.T) {
	for _, c := range []struct {
		model, gpu string
	}{{"qwen3-235b-a22b:q4_k_m", "rtx4090"}, {"qwen3-235b-a22b:q4_k_m", "a6000"}, {"deepseek-v3:q4_k_m", "rtx5090"}} {
		m, err := Model(c.model)
		if err != nil {
			t.Fatal(err)
		}
		h, err := Device(c.gpu)
		if err != nil {
			t.Fatal(err)
		}
		p := DefaultCostParams()
		// By hand: the layers that fit beside one session's cache.
		per := int(math.Floor(h.MemoryBytes * (1 - p.MemoryReserve) / (m.LayerWeightBytes() + float64(p.Context)*m.KVBytesPerToken())))
		f, err := NewFleet(m, nodesLike(h, 1), p)
		if err != nil {
			t.Fatal(err)
		}
		need := f.Needs()
		if len(need) != 1 || need[0].Layers != per {
			t.Fatalf("%s on %s: needs %+v, want %d layers a node", c.model, c.gpu, need, per)
		}
		n := need[0].Min
		if n < (m.Layers+per-1)/per {
			t.Fatalf("%s on %s: min %d below ⌈%d/%d⌉", c.model, c.gpu, n, m.Layers, per)
		}
		enough, _ := NewFleet(m, nodesLike(h, n), p)
		if _, err := NewPlanner().Full(enough, 1); err != nil {
			t.Errorf("%s on %s: %d nodes: %v", c.model, c.gpu, n, err)
		}
		short, _ := NewFleet(m, nodesLike(h, n-1), p)
		if _, err := NewPlanner().Full(short, 1); !errors.Is(err, ErrNoCoverage) {
			t.Errorf("%s on %s: %d nodes cover the model, so %d is not the least", c.model, c.gpu, n-1, n)
		}
		if got := enough.MinNodes(); got > n || got < n-1 {
			t.Errorf("fleet MinNodes %d, kind's %d (ends ignored: at most one fewer)", got, n)
		}
	}
}

func nodesLike(h Hardware, n int) []Node {
	out := make([]Node, n)
	for i := range out {
		out[i] = Node{ID: string(rune('a'+i/26)) + string(rune('a'+i%26)), Hardware: h}
	}
	return out
}

// The planner's profile charges a MoE layer for its active experts'
// FLOPs: the same shape with every expert active is compute-bound and
// far slower at the batch the profile picks.
func TestProfileChargesActiveExperts(t *testing.T) {
	m, _ := Model("deepseek-v3:q4_k_m")
	h := m.HyperParams
	h.ActiveExperts = h.Experts
	all, err := NewModelSpec(h)
	if err != nil {
		t.Fatal(err)
	}
	if all.LayerWeightBytes() != m.LayerWeightBytes() {
		t.Fatalf("same experts, different memory: %v vs %v", all.LayerWeightBytes(), m.LayerWeightBytes())
	}
	hw, _ := Device("rtx4090")
	n := Node{ID: "a", Hardware: hw}
	p, pAll := NewProfile(m, n, DefaultCostParams()), NewProfile(all, n, DefaultCostParams())
	if p.MaxLayers != pAll.MaxLayers || p.MaxLayers == 0 {
		t.Fatalf("capacity %d vs %d", p.MaxLayers, pAll.MaxLayers)
	}
	k := p.MaxLayers
	if r := p.TPS(k, 0) / pAll.TPS(k, 0); r < 3 {
		t.Errorf("8 of 256 experts active: %.1f tok/s, all active: %.1f tok/s (ratio %.2f, want > 3)", p.TPS(k, 0), pAll.TPS(k, 0), r)
	}
}

// FuzzModelSpecMoE: any shape is ErrBadSpec or has finite, positive
// sizes, in which a batch reads no more than the layer holds, more tokens
// never read less, and tokens touch between k and E experts.
func FuzzModelSpecMoE(f *testing.F) {
	f.Add(uint8(61), uint16(7168), uint8(128), uint8(128), uint16(18432), uint16(256), uint8(8), uint16(2048), uint8(1), uint8(3), uint16(512), uint16(1536), uint8(64), uint8(128), uint16(64))
	f.Add(uint8(94), uint16(4096), uint8(64), uint8(4), uint16(12288), uint16(128), uint8(8), uint16(1536), uint8(0), uint8(0), uint16(0), uint16(0), uint8(0), uint8(0), uint16(7))
	f.Add(uint8(2), uint16(64), uint8(4), uint8(0), uint16(128), uint16(0), uint8(0), uint16(0), uint8(0), uint8(0), uint16(0), uint16(0), uint8(0), uint8(0), uint16(1))
	f.Fuzz(func(t *testing.T, layers uint8, hidden uint16, heads, kvHeads uint8, ffn, experts uint16, active uint8, expertFFN uint16,
		shared, dense uint8, kvr, qr uint16, rope, vdim uint8, b uint16) {
		m, err := NewModelSpec(HyperParams{Name: "fuzz", Layers: int(layers), Hidden: int(hidden), Heads: int(heads),
			KVHeads: int(kvHeads), FFN: int(ffn), Vocab: 1000, Experts: int(experts), ActiveExperts: int(active),
			ExpertFFN: int(expertFFN), SharedExperts: int(shared), DenseLayers: int(dense), KVLoRARank: int(kvr),
			QLoRARank: int(qr), RopeHeadDim: int(rope), VHeadDim: int(vdim), BytesPerParam: 0.6})
		if err != nil {
			if !errors.Is(err, ErrBadSpec) {
				t.Fatalf("error without ErrBadSpec: %v", err)
			}
			return
		}
		w := m.LayerWeightBytes()
		for _, v := range []float64{w, m.KVBytesPerToken(), m.FLOPsPerToken(int(b)), m.TotalParams(), m.ActiveParams()} {
			if !(v > 0) || math.IsInf(v, 0) {
				t.Fatalf("size %v in %+v", v, m.HyperParams)
			}
		}
		if m.ActiveParams() > m.TotalParams()*(1+1e-9) {
			t.Fatalf("active %v above total %v", m.ActiveParams(), m.TotalParams())
		}
		r1, rb, rb1 := m.LayerReadBytesBatch(int(b)), m.LayerReadBytesBatch(int(b)+1), m.LayerReadBytesBatch(1)
		if rb > w*(1+1e-9) || rb1 > r1*(1+1e-9) || r1 > rb*(1+1e-9) {
			t.Fatalf("reads: b=%d %v, b+1 %v, b=1 %v, layer %v", b, r1, rb, rb1, w)
		}
		if m.MoE() && b > 0 {
			te := m.TouchedExperts(int(b))
			if te < float64(m.ActiveExperts)*(1-1e-9) || te > float64(m.Experts)*(1+1e-9) {
				t.Fatalf("TouchedExperts(%d) = %v, k %d, E %d", b, te, m.ActiveExperts, m.Experts)
			}
		}
	})
}
