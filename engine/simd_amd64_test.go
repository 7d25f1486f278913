package engine

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSoftmaxSIMD: the AVX-512 softmax gives softmaxPortable's bits: every
// length from 1 to 70 (tails of every size), scores spread over expf's
// whole range (subnormal results, results flushed to 0, the k > 127 and
// k < −126 branches through large spreads), ±0, ±Inf and NaN among them.
func TestSoftmaxSIMD(t *testing.T) {
	if !useSIMD || !hasAVX512 {
		t.Skip("no AVX-512")
	}
	rng := uint64(3)
	specials := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(-1)), float32(math.NaN()), 200, -200, 88.7, -87.5, -103.9, -104}
	for n := 1; n <= 70; n++ {
		for trial := 0; trial < 6; trial++ {
			s := make([]float32, n)
			for i := range s {
				u := float32(int64(splitmix(&rng)>>40)-1<<23) / (1 << 23) // [−1, 1)
				s[i] = u * []float32{1, 10, 60, 120, 250, 1e-3}[trial]
				if trial == 5 && i%7 == 3 {
					s[i] = specials[(i/7)%len(specials)]
				}
			}
			want := append([]float32(nil), s...)
			softmaxPortable(want)
			got := append([]float32(nil), s...)
			softmax(got)
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("n %d trial %d: element %d = %v (%#x), portable %v (%#x)", n, trial, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
				}
			}
		}
	}
	// Every x of expf's domain edge, through a two-element softmax whose
	// other element is 0, so that x − max = x.
	for _, x := range []float32{88.72283, 88.72282, 88, 87.4, -87.33, -87.4, -100, -103.97208, -103.97, -103.98, 1e-10, -1e-10, 0.49999997, -0.49999997} {
		for _, s := range [][]float32{{x, 0}, {0, x}} {
			want := append([]float32(nil), s...)
			softmaxPortable(want)
			got := append([]float32(nil), s...)
			softmax(got)
			if math.Float32bits(got[0]) != math.Float32bits(want[0]) || math.Float32bits(got[1]) != math.Float32bits(want[1]) {
				t.Fatalf("%v: %v, portable %v", s, got, want)
			}
		}
	}
}

// TestSoftmaxSinkSIMD: the AVX-512 sink softmax gives
// softmaxSinkPortable's bits, for sinks below, inside and above the
// scores' range (the max is then the sink's).
func TestSoftmaxSinkSIMD(t *testing.T) {
	if !useSIMD || !hasAVX512 {
		t.Skip("no AVX-512")
	}
	rng := uint64(5)
	for n := 1; n <= 70; n++ {
		for _, spread := range []float32{1, 10, 120} {
			s := make([]float32, n)
			for i := range s {
				s[i] = float32(int64(splitmix(&rng)>>40)-1<<23) / (1 << 23) * spread
			}
			for _, sink := range []float32{-2 * spread, 0, 0.5 * spread, 2 * spread, -200} {
				want := append([]float32(nil), s...)
				softmaxSinkPortable(want, sink)
				got := append([]float32(nil), s...)
				softmaxSink(got, sink)
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("n %d sink %v: element %d = %v, portable %v", n, sink, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// TestSoftmaxRowsSIMD: softmaxRows gives each row softmaxRowsPortable's
// bits, with and without sinks, for 1 to 9 rows (groups of four and the
// rows left over) of lengths from 1 to 70, the rows' spreads far apart so
// that a sum taken from the wrong row shows.
func TestSoftmaxRowsSIMD(t *testing.T) {
	if !useSIMD || !hasAVX512 {
		t.Skip("no AVX-512")
	}
	rng := uint64(9)
	for rows := 1; rows <= 9; rows++ {
		for _, n := range []int{1, 2, 15, 16, 17, 33, 64, 70} {
			s := make([]float32, rows*n)
			sinks := make([]float32, rows)
			for g := 0; g < rows; g++ {
				for i := 0; i < n; i++ {
					s[g*n+i] = float32(int64(splitmix(&rng)>>40)-1<<23) / (1 << 23) * float32(1+7*g)
				}
				sinks[g] = float32(g) - 3
			}
			for _, sk := range [][]float32{nil, sinks} {
				want := append([]float32(nil), s...)
				softmaxRowsPortable(want, n, sk)
				got := append([]float32(nil), s...)
				softmaxRows(got, n, sk)
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%d rows of %d, sinks %v: element %d = %v, portable %v", rows, n, sk != nil, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// TestSoftmaxSinkDefinition: the sink's share is what the values lose:
// the outputs sum to 1 − e^sink/Σ (float64 reference), and a sink of −Inf
// is the plain softmax, bit for bit.
func TestSoftmaxSinkDefinition(t *testing.T) {
	s := []float32{0.5, -1, 2, 0}
	sink := float32(1.5)
	got := append([]float32(nil), s...)
	softmaxSinkPortable(got, sink)
	den := math.Exp(float64(sink))
	for _, v := range s {
		den += math.Exp(float64(v))
	}
	for i, v := range s {
		if want := math.Exp(float64(v)) / den; math.Abs(float64(got[i])-want) > 1e-6 {
			t.Errorf("element %d: %v, want %v", i, got[i], want)
		}
	}
	plain := append([]float32(nil), s...)
	softmaxPortable(plain)
	inf := append([]float32(nil), s...)
	softmaxSinkPortable(inf, float32(math.Inf(-1)))
	for i := range plain {
		if math.Float32bits(plain[i]) != math.Float32bits(inf[i]) {
			t.Errorf("sink −Inf: element %d = %v, softmax %v", i, inf[i], plain[i])
		}
	}
}

// TestExpMatchesExpf: the kernel's exponentials are expf's, one by one,
// over a dense sweep of its domain and past it (x − max = x when max is
// 0).
func TestExpMatchesExpf(t *testing.T) {
	if !useSIMD || !hasAVX512 {
		t.Skip("no AVX-512")
	}
	var xs []float32
	for x := float32(-105); x <= 89; x += 0.0137 {
		xs = append(xs, x)
	}
	for b := math.Float32bits(-87); b < math.Float32bits(-87)+5000; b++ {
		xs = append(xs, math.Float32frombits(b))
	}
	got := append([]float32(nil), xs...)
	expF32(&got[0], len(got), 0, &expConsts[0])
	for i, x := range xs {
		if w := expf(x); math.Float32bits(got[i]) != math.Float32bits(w) {
			t.Fatalf("expf(%v) = %v (%#x), kernel %v (%#x)", x, w, math.Float32bits(w), got[i], math.Float32bits(got[i]))
		}
	}
}

// TestSiluMulMatchesPortable: the kernel's SwiGLU is the portable loop's,
// value by value, over a dense sweep of the gate past expf's bounds on
// both sides, around them bit by bit, and the special values, at lengths
// that leave every tail.
func TestSiluMulMatchesPortable(t *testing.T) {
	if !useSIMD || !hasAVX512 {
		t.Skip("no AVX-512")
	}
	var gs []float32
	for x := float32(-110); x <= 110; x += 0.0137 {
		gs = append(gs, x)
	}
	for _, edge := range []float32{87, 88.72283, 103.97208} {
		for _, e := range []float32{edge, -edge} {
			for b := math.Float32bits(e) - 2000; b < math.Float32bits(e)+2000; b++ {
				gs = append(gs, math.Float32frombits(b))
			}
		}
	}
	inf := float32(math.Inf(1))
	gs = append(gs, 0, float32(math.Copysign(0, -1)), inf, -inf, float32(math.NaN()),
		math.Float32frombits(1), math.Float32frombits(0x80000001), math.MaxFloat32, -math.MaxFloat32)
	us := make([]float32, len(gs))
	for i := range us {
		us[i] = float32(i%97-48) / 7
	}
	us[len(us)-1] = inf
	for _, n := range []int{len(gs), len(gs) - 1, 15, 16, 17, 1} {
		want := append([]float32(nil), gs[len(gs)-n:]...)
		got := append([]float32(nil), want...)
		u := us[len(us)-n:]
		siluMulPortable(want, u)
		siluMul(got, u)
		for i := range want {
			w, g := math.Float32bits(want[i]), math.Float32bits(got[i])
			if w != g && !(want[i] != want[i] && got[i] != got[i]) {
				x := gs[len(gs)-n+i]
				t.Fatalf("n %d: silu(%v)·%v = %v (%#x), kernel %v (%#x)", n, x, u[i], want[i], w, got[i], g)
			}
		}
	}
}

// TestQuantizeQ8KMatchesPortable: the kernel's Q8_K blocks are the
// portable form's, bit for bit, over blocks of every kind it takes and
// every kind it leaves: random scales, the largest magnitude tied between
// signs and repeated, zeros and negative zeros, a NaN or an infinity
// among the values, subnormals, scales that overflow −127/mx, and values
// near float32's largest; a left block among taken ones too.
func TestQuantizeQ8KMatchesPortable(t *testing.T) {
	if !useSIMD || !hasAVX512 {
		t.Skip("no AVX-512")
	}
	r := rand.New(rand.NewPCG(7, 8))
	var blocks [][]float32
	for _, scale := range []float32{1, 1e-3, 3e4, 1e-30, 1e30} {
		for range 20 {
			b := make([]float32, 256)
			for i := range b {
				b[i] = float32(r.NormFloat64()) * scale
			}
			blocks = append(blocks, b)
		}
	}
	edit := func(f func(b []float32)) {
		b := make([]float32, 256)
		for i := range b {
			b[i] = float32(r.NormFloat64())
		}
		f(b)
		blocks = append(blocks, b)
	}
	edit(func(b []float32) { b[40], b[7] = 9, -9 })
	edit(func(b []float32) { b[7], b[40] = 9, -9 })
	edit(func(b []float32) { b[255] = -20; b[254] = 20 })
	edit(func(b []float32) { b[3] = float32(math.NaN()) })
	edit(func(b []float32) { b[100] = float32(math.Inf(-1)) })
	edit(func(b []float32) {
		for i := range b {
			b[i] = 0
		}
	})
	edit(func(b []float32) {
		for i := range b {
			b[i] = float32(math.Copysign(0, -1))
		}
	})
	edit(func(b []float32) {
		for i := range b {
			b[i] = math.Float32frombits(uint32(r.IntN(1 << 23)))
		}
	})
	edit(func(b []float32) {
		for i := range b {
			b[i] *= 1e-37
		}
	})
	edit(func(b []float32) {
		for i := range b {
			b[i] = float32(i%5) * 1e-38
		}
	})
	edit(func(b []float32) { b[9] = math.MaxFloat32; b[10] = -math.MaxFloat32 })
	edit(func(b []float32) {
		for i := range b {
			b[i] = float32(i%11 - 5)
		}
	})
	x := make([]float32, 0, 256*len(blocks))
	for _, b := range blocks {
		x = append(x, b...)
	}
	nb := len(blocks)
	for _, sub := range [][2]int{{0, nb}, {nb - 1, nb}, {nb - 12, nb}, {3, 4}} {
		xs := x[256*sub[0] : 256*sub[1]]
		n := sub[1] - sub[0]
		wq, gq := make([]int8, 256*n), make([]int8, 256*n)
		wd, gd := make([]float32, n), make([]float32, n)
		ws, gs := make([]int16, 16*n), make([]int16, 16*n)
		for b := range n {
			quantizeQ8KBlock(xs[256*b:256*b+256], wq[256*b:256*b+256], &wd[b], ws[16*b:16*b+16])
		}
		quantizeQ8K(xs, gq, gd, gs)
		for b := range n {
			if math.Float32bits(wd[b]) != math.Float32bits(gd[b]) {
				t.Fatalf("block %d: d %v, portable %v", sub[0]+b, gd[b], wd[b])
			}
			for i := 16 * b; i < 16*b+16; i++ {
				if ws[i] != gs[i] {
					t.Fatalf("block %d: sum %d = %d, portable %d", sub[0]+b, i%16, gs[i], ws[i])
				}
			}
			for i := 256 * b; i < 256*b+256; i++ {
				if wq[i] != gq[i] {
					t.Fatalf("block %d: value %d (x %v) = %d, portable %d", sub[0]+b, i%256, xs[i], gq[i], wq[i])
				}
			}
		}
	}
	if n := quantizeQ8KSIMD(x, make([]int8, len(x)), make([]float32, nb), make([]int16, 16*nb)); n != 103 {
		t.Fatalf("the kernel took %d blocks; want the 103 before the one with a NaN", n)
	}
}

// TestWidenRows: the SIMD widening gives widenRow's values for every half
// and every bfloat16 (a signalling NaN comes out as the same NaN, quiet).
func TestWidenRows(t *testing.T) {
	raw := make([]byte, 2*(1<<16)+6)
	for i := 0; i < 1<<16; i++ {
		raw[2*i], raw[2*i+1] = byte(i), byte(i>>8)
	}
	for _, typ := range []DType{F16, BF16} {
		n := 1<<16 + 3
		want, got := make([]float32, n), make([]float32, n)
		widenRow(want, raw, typ)
		widenRows(got, raw, typ)
		for i := range got {
			w, g := math.Float32bits(want[i]), math.Float32bits(got[i])
			if w != g && !(want[i] != want[i] && w|1<<22 == g) {
				t.Fatalf("%s %#04x: %#08x, widenRow %#08x", typ, i, g, w)
			}
		}
	}
}

// TestHalfDecode: the fused F16 decode kernel gives the portable bits, on
// random halves with subnormals, infinities and NaNs among them.
func TestHalfDecode(t *testing.T) {
	rng := uint64(17)
	for _, c := range []int{16, 48, 256} {
		rows := 24
		raw := make([]byte, 2*rows*c)
		for i := 0; i < rows*c; i++ {
			h := uint16(splitmix(&rng)) & 0xbfff // finite, mostly
			if i%97 == 5 {
				h = []uint16{0x7c00, 0xfc00, 0x7e01, 0x0001, 0x8000}[i%5]
			}
			raw[2*i], raw[2*i+1] = byte(h), byte(h>>8)
		}
		w := &matrix{rows: rows, cols: c, raw: raw, typ: F16}
		x := make([]float32, c)
		for i := range x {
			x[i] = float32(int64(splitmix(&rng)>>40)-1<<23) / (1 << 20)
		}
		got := make([]float32, rows)
		if !halfDecode(got, w, x, 0, rows) && useSIMD && hasAVX512 {
			t.Fatal("kernel not used")
		}
		want := make([]float32, rows)
		useSIMD = false
		matmulHalf(want, w, newAct(x, 1, c), 0, rows)
		useSIMD = true
		if !sameBits(got, want) {
			t.Fatalf("%d columns: %v, portable %v", c, got, want)
		}
	}
}

// TestGemmTiles: the 4×4 F32/F16/BF16 tiles and the rows and activation
// rows around them give the portable bits, and so do F16 and BF16 in
// hil.go's layout, with the blocks widened first or not, for row counts
// and activation counts that leave remainders, row slices as the pool
// cuts them, and non-finite weights among finite ones.
func TestGemmTiles(t *testing.T) {
	defer func(v int) { hilWidenCols = v }(hilWidenCols)
	rng := uint64(23)
	for _, typ := range []DType{F32, F16, BF16} {
		for _, tc := range []struct{ rows, cols, n int }{{4, 16, 4}, {13, 48, 9}, {40, 256, 70}, {7, 32, 3}} {
			w := &matrix{rows: tc.rows, cols: tc.cols, typ: typ}
			vals := make([]float32, tc.rows*tc.cols)
			for i := range vals {
				vals[i] = float32(int64(splitmix(&rng)>>40)-1<<23) / (1 << 22)
				if i%89 == 7 {
					vals[i] = []float32{float32(math.Inf(1)), float32(math.NaN()), 1e-40}[i%3]
				}
			}
			if typ == F32 {
				w.f = vals
			} else {
				w.raw = make([]byte, 2*len(vals))
				for i, v := range vals {
					h := f32ToF16(v)
					if typ == BF16 {
						h = f32ToBF16(v)
					}
					w.raw[2*i], w.raw[2*i+1] = byte(h), byte(h>>8)
				}
			}
			x := make([]float32, tc.n*tc.cols)
			for i := range x {
				x[i] = float32(int64(splitmix(&rng)>>40)-1<<23) / (1 << 20)
			}
			a := newAct(x, tc.n, tc.cols)
			mul := func(out []float32, r0, r1 int) {
				if typ == F32 {
					matmulF32(out, w, a, r0, r1)
				} else {
					matmulHalf(out, w, a, r0, r1)
				}
			}
			got := make([]float32, tc.n*tc.rows)
			for r := 0; r < tc.rows; r += 16 {
				mul(got, r, min(r+16, tc.rows))
			}
			useSIMD = false
			want := make([]float32, tc.n*tc.rows)
			mul(want, 0, tc.rows)
			useSIMD = true
			if !sameBits(got, want) {
				t.Fatalf("%s %v: tiles %v, portable %v", typ, tc, got, want)
			}
			if typ == F32 {
				continue
			}
			// hil.go's layout, cut as the pool cuts (multiples of 16) and
			// elsewhere, the last block padded where rows%8 ≠ 0.
			wi := *w
			wi.raw = append([]byte(nil), w.raw...)
			wi.interleaveF16()
			if wi.il == nil {
				t.Fatalf("%s not interleaved", typ)
			}
			// Widened a column block at a time (gemm4x4W), in one block or
			// several, and not (hilWidenCols 0).
			for _, widen := range []int{2048, 32, 0} {
				hilWidenCols = widen
				il := make([]float32, tc.n*tc.rows)
				for _, cut := range [][2]int{{0, 3}, {3, 16}, {16, 21}, {21, 1 << 30}} {
					if lo, hi := cut[0], min(cut[1], tc.rows); lo < hi {
						matmulHalf(il, &wi, a, lo, hi)
					}
				}
				if !sameBits(il, want) {
					t.Fatalf("%s %v interleaved, widening up to %d columns: %v, portable %v", typ, tc, widen, il, want)
				}
			}
		}
	}
}

// TestScaleSIMD: the AVX-512 scale gives scalePortable's bits for every
// length from 1 to 40 (tails of every size), NaN, ±Inf and subnormals among
// the values.
func TestScaleSIMD(t *testing.T) {
	if !useSIMD || !hasAVX512 {
		t.Skip("no AVX-512")
	}
	rng := uint64(9)
	specials := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 1e-40, -1e-45, float32(math.Copysign(0, -1))}
	for n := 1; n <= 40; n++ {
		s := make([]float32, n)
		for i := range s {
			s[i] = math.Float32frombits(uint32(splitmix(&rng)))
			if i%5 == 2 {
				s[i] = specials[i%len(specials)]
			}
		}
		for _, f := range []float32{0.125, 0.0883883, 3e-39, float32(math.Inf(1))} {
			want := append([]float32(nil), s...)
			scalePortable(want, f)
			got := append([]float32(nil), s...)
			scale(got, f)
			if !sameBits(got, want) {
				t.Fatalf("n %d, f %v: %v, portable %v", n, f, got, want)
			}
		}
	}
}

// TestAttnAVSIMD: attention's weighted sum of V rows gives
// attnAVPortable's bits through the AVX kernel and the AVX-512 one, for
// head widths with and without a tail of fewer than 64 outputs.
func TestAttnAVSIMD(t *testing.T) {
	if !useSIMD || !hasAVX {
		t.Skip("no AVX")
	}
	rng := uint64(11)
	r := func() float32 { return float32(int64(splitmix(&rng)>>40)-1<<23) / (1 << 20) }
	for _, width := range []int{64, 128, 100, 7} {
		for _, np := range []int{1, 2, 9, 64} {
			stride := width + 16
			v := make([]float32, np*stride)
			for i := range v {
				v[i] = r()
			}
			p := make([]float32, np)
			for i := range p {
				p[i] = r()
			}
			start := make([]float32, width)
			for i := range start {
				start[i] = r()
			}
			want := append([]float32(nil), start...)
			attnAVPortable(want, v, stride, p)
			for _, z := range []bool{false, hasAVX512} {
				saved := hasAVX512
				hasAVX512 = z
				got := append([]float32(nil), start...)
				attnAV(got, v, stride, p)
				hasAVX512 = saved
				if !sameBits(got, want) {
					t.Fatalf("width %d, %d positions, AVX-512 %v: %v, portable %v", width, np, z, got, want)
				}
			}
		}
	}
}

// TestFMA32Hardware: VFMADD231PS gives fma32's bits on fmaCases and on
// NaNs of three payloads, quiet and signalling, in every operand: each
// case is lane 0 of a 32-column row, acc then w against activations 1
// then x, through dot4FMA against dotFused.
func TestFMA32Hardware(t *testing.T) {
	if !useSIMD || !hasFMA {
		t.Skip("no FMA")
	}
	cs := fmaCases()
	nan := func(payload uint32, quiet bool) float32 {
		b := uint32(0x7f800000) | payload
		if quiet {
			b |= 1 << 22
		}
		return math.Float32frombits(b)
	}
	vals := []float32{1.5, nan(1, true), nan(2, false), nan(3, true) * -1}
	for _, w := range vals {
		for _, x := range vals {
			for _, acc := range vals {
				cs = append(cs, [3]float32{w, x, acc})
			}
		}
	}
	const cols = 32
	w, x := make([]float32, 4*cols), make([]float32, cols)
	got := make([]float32, 4)
	for _, c := range cs {
		w[0], w[16], x[0], x[16] = c[2], c[0], 1, c[1]
		want := dotFused(w[:cols], x)
		dot4FMA(&got[0], &w[0], &x[0], cols, cols)
		if math.Float32bits(got[0]) != math.Float32bits(want) {
			t.Fatalf("w %g x %g acc %g (%#08x %#08x %#08x): %g (%#08x), dotFused %g (%#08x)", c[0], c[1], c[2],
				math.Float32bits(c[0]), math.Float32bits(c[1]), math.Float32bits(c[2]), got[0], math.Float32bits(got[0]), want, math.Float32bits(want))
		}
	}
}
