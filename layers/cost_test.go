package layers

import (
	"errors"
	"math"
	"testing"
)

func near(a, b, rel float64) bool { return math.Abs(a-b) <= rel*math.Max(math.Abs(a), math.Abs(b)) }

func TestModelSpecDerivedSizes(t *testing.T) {
	m, err := Model("llama-3-8b")
	if err != nil {
		t.Fatal(err)
	}
	// Hand-computed from Llama-3-8B's config: Q,O 4096², K,V 4096×1024,
	// three FFN matrices 4096×14336 and two norms.
	if got, want := m.LayerParams(), 41_943_040.0+176_160_768+8192; got != want {
		t.Errorf("LayerParams = %v, want %v", got, want)
	}
	if got := m.LayerWeightBytes(); got != 436_224_000 {
		t.Errorf("LayerWeightBytes = %v", got)
	}
	if got := m.KVBytesPerToken(); got != 4096 {
		t.Errorf("KVBytesPerToken = %v", got)
	}
	if got := m.FLOPsPerToken(1000); got != 436_207_616+16_384_000 {
		t.Errorf("FLOPsPerToken = %v", got)
	}
	if got := m.TotalParams(); !near(got, 8.03e9, 0.001) {
		t.Errorf("TotalParams = %v, want about 8.03e9", got)
	}
	if got := m.ActivationBytesPerToken(); got != 4096*4 {
		t.Errorf("ActivationBytesPerToken = %v", got)
	}
	q, err := Model("Llama-3-8B:q8_0")
	if err != nil {
		t.Fatal(err)
	}
	if got := q.LayerWeightBytes(); !near(got, 218_112_000*34.0/32, 1e-12) {
		t.Errorf("q8_0 LayerWeightBytes = %v", got)
	}
	mx, _ := Model("mixtral-8x7b")
	if mx.LayerParams() <= 8*3*4096*14336 || mx.FLOPsPerToken(0) >= 2*mx.LayerParams() {
		t.Errorf("mixtral: all experts must count in weights, active ones in FLOPs")
	}
	for _, name := range ModelNames() {
		if _, err := Model(name); err != nil {
			t.Errorf("built-in %s: %v", name, err)
		}
	}
}

func TestBadSpecsAreClearErrors(t *testing.T) {
	if _, err := Model("gpt-7"); !errors.Is(err, ErrUnknownModel) {
		t.Errorf("unknown model: %v", err)
	}
	if _, err := Model("llama-3-8b:fp3"); !errors.Is(err, ErrUnknownModel) {
		t.Errorf("unknown format: %v", err)
	}
	bad := []HyperParams{
		{Layers: 0, Hidden: 64, Heads: 4, FFN: 128, Vocab: 256, BytesPerParam: 2},
		{Layers: 2, Hidden: 64, Heads: 5, FFN: 128, Vocab: 256, BytesPerParam: 2},
		{Layers: 2, Hidden: 64, Heads: 4, KVHeads: 3, FFN: 128, Vocab: 256, BytesPerParam: 2},
		{Layers: 2, Hidden: 64, Heads: 4, FFN: 128, Vocab: 256, BytesPerParam: math.NaN()},
		{Layers: 2, Hidden: 64, Heads: 4, FFN: 128, Vocab: 256, BytesPerParam: 2, Experts: 2, ActiveExperts: 3},
	}
	for i, h := range bad {
		if _, err := NewModelSpec(h); !errors.Is(err, ErrBadSpec) {
			t.Errorf("case %d: want ErrBadSpec, got %v", i, err)
		}
	}
	if _, err := Device("gtx-9999"); !errors.Is(err, ErrBadSpec) {
		t.Errorf("unknown device: %v", err)
	}
	for _, h := range []Hardware{{MemoryBytes: 1, MemBandwidth: 1}, {MemoryBytes: math.Inf(1), MemBandwidth: 1, TFLOPS: 1}, {MemoryBytes: 1, MemBandwidth: 1, TFLOPS: 1, NetBandwidth: -1}} {
		if err := h.Validate(); !errors.Is(err, ErrBadSpec) {
			t.Errorf("%+v: want ErrBadSpec, got %v", h, err)
		}
	}
	for _, n := range []string{"rtx4090", "4090", "NVIDIA-H100", "m3-max"} {
		if _, err := Device(n); err != nil {
			t.Errorf("Device(%q): %v", n, err)
		}
	}
}

func TestDecodeTimeRoofline(t *testing.T) {
	m, _ := Model("llama-3-8b")
	h := Hardware{Name: "x", MemoryBytes: 16 * GiB, MemBandwidth: 1e12, TFLOPS: 100}
	// Memory-bound: (436,224,000 + 10·1000·4096) bytes at 1 TB/s.
	if got := DecodeLayerTime(m, h, 10, 1000); !near(got, 477.184e-6, 1e-12) {
		t.Errorf("DecodeLayerTime(b=10) = %v", got)
	}
	// Compute-bound at a huge batch: b·FLOPs / 100 TFLOPS.
	b := 100000
	if got, want := DecodeLayerTime(m, h, b, 10), float64(b)*m.FLOPsPerToken(10)/1e14; !near(got, want, 1e-12) {
		t.Errorf("DecodeLayerTime(b=%d) = %v, want %v", b, got, want)
	}
	if PrefillLayerTime(m, h, 512) <= DecodeLayerTime(m, h, 1, 512) {
		t.Errorf("a 512-token prefill must cost more than one decode step")
	}
}

func TestProfileHandComputed(t *testing.T) {
	m, _ := Model("llama-3-8b")
	h := Hardware{Name: "x", MemoryBytes: 16 * GiB, MemBandwidth: 1e12, TFLOPS: 100}
	p := NewProfile(m, Node{ID: "a", Hardware: h}, CostParams{Context: 1000, MemoryReserve: 0.1, MaxBatch: -1})
	// usable 0.9·16 GiB; 4 layers leave room for 837 sequences of 1000
	// tokens; a step is 4 × 3.864576 ms.
	if got := p.Batch(4, 0); got != 837 {
		t.Errorf("Batch(4) = %d, want 837", got)
	}
	if got := p.TPS(4, 0); !near(got, 54145.655306041335, 1e-9) {
		t.Errorf("TPS(4) = %v", got)
	}
	// Holding the head costs memory and time.
	if p.TPS(4, EndHead) >= p.TPS(4, 0) || p.Batch(4, EndEmbed) >= p.Batch(4, 0) {
		t.Errorf("ends must cost: %v %v", p.TPS(4, EndHead), p.Batch(4, EndEmbed))
	}
	// The trade-off: fewer layers leave more KV cache, a larger batch and
	// more layer-tokens per second.
	if !(float64(2)*p.TPS(2, 0) > float64(16)*p.TPS(16, 0)) {
		t.Errorf("k·tps must fall as layers fill memory: 2→%v 16→%v", 2*p.TPS(2, 0), 16*p.TPS(16, 0))
	}
	if p.TPS(p.MaxLayers+1, 0) != 0 || p.TPS(0, 0) != 0 {
		t.Errorf("TPS outside [1, MaxLayers] must be 0")
	}
	// A link caps a node that passes activations on.
	h.NetBandwidth = 1 * Gbit
	pl := NewProfile(m, Node{ID: "a", Hardware: h}, CostParams{Context: 1000, MemoryReserve: 0.1, MaxBatch: -1})
	if got, want := pl.TPS(4, 0), 1*Gbit/m.ActivationBytesPerToken(); got != want {
		t.Errorf("link-capped TPS = %v, want %v", got, want)
	}
	// Measured speed scales throughput.
	ps := NewProfile(m, Node{ID: "a", Hardware: Hardware{Name: "x", MemoryBytes: 16 * GiB, MemBandwidth: 1e12, TFLOPS: 100}, Speed: 0.5},
		CostParams{Context: 1000, MemoryReserve: 0.1, MaxBatch: -1})
	if !near(ps.TPS(4, 0), p.TPS(4, 0)/2, 1e-12) {
		t.Errorf("speed 0.5: %v vs %v", ps.TPS(4, 0), p.TPS(4, 0))
	}
}

func TestProfileCapacityRespectsMemory(t *testing.T) {
	m, _ := Model("llama-3-70b")
	for _, name := range DeviceNames() {
		h, _ := Device(name)
		p := NewProfile(m, Node{ID: name, Hardware: h}, DefaultCostParams())
		usable := h.MemoryBytes * 0.9
		for e := Ends(0); e < 4; e++ {
			k := p.Capacity(e)
			if k == 0 {
				continue
			}
			need := float64(k)*(m.LayerWeightBytes()+2048*m.KVBytesPerToken()) + e.bytes(m)
			if need > usable {
				t.Errorf("%s ends %d: %d layers need %.1f GB of %.1f", name, e, k, need/1e9, usable/1e9)
			}
		}
	}
}

// TestKVCapBoundsRate checks the KV-bound rate: never above the compute
// rate, equal to sessions ÷ a whole path's time where memory binds, lower
// for longer sessions, and lower for a node with the same compute but less
// memory; off, the profile is the compute one.
func TestKVCapBoundsRate(t *testing.T) {
	m, err := Model("llama-3-70b")
	if err != nil {
		t.Fatal(err)
	}
	a100, _ := Device("a100-40g")
	small := a100
	small.MemoryBytes = 24 * GiB
	base := DefaultCostParams()
	kv := base
	kv.SessionTokens = 1000
	longer := kv
	longer.SessionTokens = 4000
	for _, h := range []Hardware{a100, small} {
		n := Node{ID: "n", Hardware: h}
		off, on, long := NewProfile(m, n, base), NewProfile(m, n, kv), NewProfile(m, n, longer)
		if off.MaxLayers != on.MaxLayers || on.MaxLayers == 0 {
			t.Fatalf("%s: MaxLayers %d off, %d on", h.Name, off.MaxLayers, on.MaxLayers)
		}
		for k := 1; k <= on.MaxLayers; k++ {
			for e := Ends(0); e < 4; e++ {
				c, v, l := off.TPS(k, e), on.TPS(k, e), long.TPS(k, e)
				if c == 0 {
					if v != 0 {
						t.Errorf("%s k=%d e=%d: %v with the KV cap where compute gives 0", h.Name, k, e, v)
					}
					continue
				}
				if !(v > 0 && v <= c*(1+1e-12)) {
					t.Errorf("%s k=%d e=%d: KV-capped %v, compute %v", h.Name, k, e, v, c)
				}
				if l > v*(1+1e-12) {
					t.Errorf("%s k=%d e=%d: 4,000-token sessions %v > 1,000-token %v", h.Name, k, e, l, v)
				}
			}
		}
		// Where memory, not MaxBatch, binds: sessions ÷ (L × layer time).
		k := on.MaxLayers
		free := h.MemoryBytes*(1-base.MemoryReserve) - float64(k)*m.LayerWeightBytes()
		sess := int(math.Floor(free / (1000 * m.KVBytesPerToken() * float64(k))))
		if sess < 1 || sess >= base.MaxBatch {
			t.Fatalf("%s: %d sessions at k=%d: not a memory-bound case", h.Name, sess, k)
		}
		want := float64(sess) / (float64(m.Layers) * DecodeLayerTime(m, h, sess, 1000))
		if got := on.TPS(k, 0); !near(got, want, 1e-9) {
			t.Errorf("%s k=%d: TPS %v, want %v sessions over a path's time = %v", h.Name, k, got, sess, want)
		}
	}
	big, little := NewProfile(m, Node{ID: "a", Hardware: a100}, kv), NewProfile(m, Node{ID: "b", Hardware: small}, kv)
	if k := little.MaxLayers; !(little.TPS(k, 0) < big.TPS(k, 0)) {
		t.Errorf("k=%d: 24 GiB node %v not below 40 GiB node %v", k, little.TPS(k, 0), big.TPS(k, 0))
	}
}
