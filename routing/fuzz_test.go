package routing

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stratanet/strata/layers"
)

// bytesIn hands out fuzz input, zeros once it runs out.
type bytesIn []byte

func (b *bytesIn) byte() byte {
	if len(*b) == 0 {
		return 0
	}
	x := (*b)[0]
	*b = (*b)[1:]
	return x
}

func (b *bytesIn) u64() uint64 {
	var buf [8]byte
	for i := range buf {
		buf[i] = b.byte()
	}
	return binary.LittleEndian.Uint64(buf[:])
}

func (b *bytesIn) f64() float64 { return math.Float64frombits(b.u64()) }
func (b *bytesIn) i32() int     { return int(int32(uint32(b.u64()))) }

// checkRouted asserts what any successful route must satisfy, and that a
// failure is one of the documented errors.
func checkRouted(t *testing.T, m layers.LayerMap, v *View, req Request, p Path, err error) {
	t.Helper()
	if err != nil {
		if !errors.Is(err, ErrNoPath) && !errors.Is(err, layers.ErrBadMap) && !errors.Is(err, ErrWrongModel) {
			t.Fatalf("undocumented error: %v", err)
		}
		return
	}
	checkPath(t, m, p)
	if math.IsNaN(p.Cost) || math.IsInf(p.Cost, 0) || p.Cost < 0 {
		t.Fatalf("cost %v", p.Cost)
	}
	for _, h := range p.Hops {
		n, ok := v.Node(h.Node)
		if !ok || n.Health != Alive || (n.Phase != Serving && n.Phase != Warming) {
			t.Fatalf("hop %v on an excluded node %+v", h, n)
		}
		for _, a := range req.Avoid {
			if a == h.Node {
				t.Fatalf("hop %v on an avoided node", h)
			}
		}
	}
}

// FuzzRouteView routes on views built from raw bytes: any layer count up
// to 12, duplicate and missing nodes, every health and phase, NaN, Inf,
// negative and huge figures, odd round trips and requests.
func FuzzRouteView(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		in := bytesIn(data)
		L := 1 + int(in.byte()%12)
		model, err := layers.NewModelSpec(layers.HyperParams{Name: "fuzz", Layers: L, Hidden: 64, Heads: 4,
			FFN: 128, Vocab: 100, BytesPerParam: 2})
		if err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig()
		cfg.Slack = float64(in.byte()%4) / 4
		cfg.Candidates = int(in.byte() % 4)
		r, err := New(WithModel(model), WithConfig(cfg))
		if err != nil {
			t.Fatal(err)
		}
		n := int(in.byte() % 24)
		m := layers.LayerMap{Layers: L, Epoch: in.u64()}
		v := NewView()
		ids := make([]string, 0, n)
		for range n {
			id := fmt.Sprintf("n%d", in.byte()%32)
			ids = append(ids, id)
			s := int(in.byte()) % L
			e := s + 1 + int(in.byte())%(L-s)
			flags := in.byte()
			if flags&0x80 == 0 {
				m.Stages = append(m.Stages, stage(id, s, e))
			}
			if flags&0x40 != 0 {
				continue // in the map, not in the view
			}
			ns := NodeState{
				ID:             id,
				Health:         Health(flags & 3),
				Phase:          Phase(flags >> 2 & 3),
				Relayed:        flags&0x10 != 0,
				Region:         fmt.Sprint(flags >> 5 & 1),
				LayerLatency:   in.f64(),
				Speed:          in.f64(),
				QueueDepth:     in.i32(),
				ActiveSessions: in.i32(),
				FreeKV:         in.i32(),
				Updated:        testNow.Add(-time.Duration(in.byte()) * time.Second),
			}
			if flags&0x20 != 0 {
				ns.Hardware = layers.Hardware{MemoryBytes: in.f64(), MemBandwidth: in.f64(), TFLOPS: in.f64(), NetBandwidth: in.f64()}
			}
			v.Set(ns)
		}
		// Round trips between whatever nodes the bytes name.
		for len(in) > 0 && len(ids) > 0 {
			a, b := ids[int(in.byte())%len(ids)], ids[int(in.byte())%len(ids)]
			v.SetRTT(a, b, in.f64())
		}
		// Sort the stages as a committed map would have them, unless the
		// duplicates make it invalid: the router must say so either way.
		if mm, err := layers.NewLayerMap(m.Layers, m.Epoch, m.Stages...); err == nil {
			m = mm
		}
		req := Request{PromptTokens: int(int16(len(data))), MaxTokens: len(data) % 7, Seed: uint64(len(data))}
		if len(ids) > 0 {
			req.Entry = ids[len(data)%len(ids)]
			req.Avoid = []string{ids[(len(data)/3)%len(ids)]}
		}
		p, err := r.Route(m, v, req, testNow)
		checkRouted(t, m, v, req, p, err)
		if err == nil {
			q, err := r.Evaluate(m, v, req, testNow, p)
			if err != nil || math.Abs(q.Cost-p.Cost) > 1e-9*math.Max(1, p.Cost) {
				t.Fatalf("evaluate %v: %v (%v vs %v)", p, err, q.Cost, p.Cost)
			}
		}
		ps, err := r.Paths(m, v, req, testNow, 3)
		for _, p := range ps {
			checkRouted(t, m, v, req, p, err)
		}
	})
}

// FuzzRouteLarge routes on generated swarms of up to 10,000 nodes over
// 80 layers, with odd figures sprinkled in as the mask says: NaN, Inf,
// negative and huge latencies, speeds, queues and round trips.
func FuzzRouteLarge(f *testing.F) {
	f.Fuzz(func(t *testing.T, n uint16, seed uint64, mask uint8) {
		count := int(n) % 10001
		rng := rand.New(rand.NewPCG(seed, 11))
		odd := func(bit uint8, normal float64) float64 {
			if mask&bit == 0 || rng.IntN(4) != 0 {
				return normal
			}
			return []float64{math.NaN(), math.Inf(1), math.Inf(-1), -1, 1e308, 5e-324, 0}[rng.IntN(7)]
		}
		r := newRouter(t)
		var stages []layers.Stage
		v := NewView()
		for i := range count {
			id := fmt.Sprintf("n%d", i)
			s := rng.IntN(80)
			stages = append(stages, stage(id, s, s+1+rng.IntN(80-s)))
			ns := NodeState{ID: id, Region: fmt.Sprint(rng.IntN(40)), FreeKV: rng.IntN(1<<20) - 1000,
				LayerLatency: odd(1, 1e-4), Speed: odd(2, 1), Updated: testNow}
			ns.Hardware = mustDevice(t, "rtx4090")
			ns.Hardware.MemBandwidth = odd(4, ns.Hardware.MemBandwidth)
			ns.Hardware.NetBandwidth = odd(8, 1e9)
			ns.QueueDepth = rng.IntN(100)
			if mask&16 != 0 && rng.IntN(8) == 0 {
				ns.QueueDepth, ns.ActiveSessions = math.MaxInt, math.MinInt
			}
			if mask&32 != 0 && rng.IntN(8) == 0 {
				ns.Health = Suspect
			}
			v.Set(ns)
		}
		for i := range count {
			for range 4 {
				v.SetRTT(fmt.Sprint("n", i), fmt.Sprint("n", rng.IntN(count)), odd(64, 0.02))
			}
		}
		m := layers.LayerMap{Layers: 80, Epoch: 1}
		if mm, err := layers.NewLayerMap(80, 1, stages...); err == nil {
			m = mm
		}
		req := Request{Entry: "n0", PromptTokens: rng.IntN(5000), Seed: seed}
		if mask&128 != 0 {
			req.PromptTokens, req.MaxTokens = math.MaxInt, math.MaxInt
		}
		p, err := r.Route(m, v, req, testNow)
		checkRouted(t, m, v, req, p, err)
	})
}
