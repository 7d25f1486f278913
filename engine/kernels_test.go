package engine

import (
	"math"
	"math/big"
	"testing"
)

// TestKernelsBitIdentical: the SIMD kernels give the portable kernels'
// bits, on awkward values (mixed magnitudes, subnormals, cancellation).
func TestKernelsBitIdentical(t *testing.T) {
	if !useSIMD || !hasAVX {
		t.Skip("no SIMD kernel on this machine")
	}
	rng := uint64(99)
	val := func() float32 {
		u := unitFloat(&rng)
		switch splitmix(&rng) % 8 {
		case 0:
			return u * 1e-39 // subnormal
		case 1:
			return u * 1e6
		case 2:
			return 0
		}
		return u
	}
	for _, cols := range []int{16, 32, 48, 64, 288, 768, 2048} {
		for trial := 0; trial < 20; trial++ {
			const rows = 13 // 8 + 4 + 1: every kernel width
			w, x := make([]float32, rows*cols), make([]float32, cols)
			for i := range w {
				w[i] = val()
			}
			for i := range x {
				x[i] = val()
			}
			a, b := make([]float32, rows), make([]float32, rows)
			dotRowsF32Portable(a, w, x)
			dotRowsF32(b, w, x)
			if !sameBits(a, b) {
				t.Fatalf("f32 cols %d: portable %v, %s %v", cols, a, simdKernel, b)
			}
			if cols%32 != 0 {
				continue
			}
			nb := cols / 32
			wq, wd := make([]int8, rows*cols), make([]float32, rows*nb)
			for i := range wq {
				wq[i] = int8(splitmix(&rng))
				if i%97 == 0 {
					wq[i] = -128
				}
			}
			for i := range wd {
				wd[i] = f16ToF32(uint16(splitmix(&rng)) & 0x7bff)
			}
			xq, xd := make([]int8, cols), make([]float32, nb)
			quantizeQ8(x, xq, xd)
			dotRowsQ8Portable(a, wq, wd, xq, xd)
			m := &matrix{rows: rows, cols: cols, q8: q8ilFromPlain(wq, wd, rows, cols)}
			matmulQ8(b, m, q8Act(xq, xd, 1, cols), 0, rows)
			if !sameBits(a, b) {
				t.Fatalf("q8 cols %d: portable %v, %s %v", cols, a, simdKernel, b)
			}
		}
	}
}

// TestForwardSIMDEqualsPortable: whole-model logits are the same bits with
// the SIMD kernels on and off (and, for the K-quants, the interleaved
// layout or the plain one), after a prefill of 5 (a 4-token tile and a
// 1-token one) and a decode.
func TestForwardSIMDEqualsPortable(t *testing.T) {
	if !useSIMD {
		t.Skip("no SIMD kernel on this machine")
	}
	for _, tc := range []struct {
		shape string
		dt    DType
		mix   string
	}{{"qwen2", F32, ""}, {"qwen2", Q8_0, ""}, {"qwen2", F16, ""}, {"qwen2", BF16, ""},
		{"llama-q4_k_m", Q4_K, ""}, {"llama-q4_k_m", Q5_K, ""}, {"llama-q4_k_m", Q6_K, ""},
		{"llama-q4_k_m", F32, "q4_k_m"}, {"llama-q4_k_m", F32, "q5_k_m"}} {
		c := testShapes[tc.shape]
		c.DType, c.Mix = tc.dt, tc.mix
		path := genModel(t, c)
		logits := func() []float32 {
			p := openPipeline(t, path, []int{0, c.Layers}, 2, 16)
			p.step(t, []int32{3, 4, 5, 7, 9})
			return p.step(t, []int32{6})
		}
		simd := logits()
		useSIMD = false
		portable := logits()
		useSIMD = true
		if !sameBits(simd, portable) {
			t.Fatalf("%s %s%s: SIMD and portable logits differ", tc.shape, tc.dt, tc.mix)
		}
	}
}

// fmaCases are (w, x, acc) triples for fma32: sums whose float64 rounding
// lands exactly halfway between two float32 values while the exact sum
// does not (w·x = 2^e·(1 + 2^-30), 2^30 + 1 = 13325 · 80581), in the
// normal and the subnormal range and with every sign, near overflow,
// exact ties, zeros, and random values over many magnitudes.
func fmaCases() [][3]float32 {
	const a, b = 13325, 80581
	sc := func(v float64, e int) float32 { return float32(math.Ldexp(v, e)) }
	var cs [][3]float32
	for _, s := range []float32{1, -1} {
		cs = append(cs,
			[3]float32{sc(a, -27), s * sc(b, -27), s},            // 1 + 2^-24 + 2^-54
			[3]float32{sc(a, -27), -s * sc(b, -27), s},           // 1 − 2^-24 − 2^-54
			[3]float32{sc(a, -90), s * sc(b, -90), s * 0x1p-127}, // subnormal result
			[3]float32{sc(a, -90), s * sc(b, -90), s * 0x1p-126},
			[3]float32{sc(a, 24), s * sc(b, 23), s * math.MaxFloat32},
			[3]float32{s * 0x1p-24, 1, 1},               // an exact tie
			[3]float32{s * 0x1p-24, 1, 1 + 0x1p-23},     // an exact tie, to even upwards
			[3]float32{s * 0x1p103, 1, math.MaxFloat32}, // exactly the threshold to infinity
			[3]float32{0, s, float32(math.Copysign(0, -1))},
			[3]float32{3, s, -3 * s},
		)
	}
	rng := uint64(17)
	for i := 0; i < 20000; i++ {
		v := func() float32 {
			u := unitFloat(&rng)
			return float32(math.Ldexp(float64(u), int(splitmix(&rng)%80)-40))
		}
		w, x, acc := v(), v(), v()
		if i%3 == 0 { // cancellation
			acc = -float32(float64(w) * float64(x))
		}
		cs = append(cs, [3]float32{w, x, acc})
	}
	return cs
}

// TestFMA32Exact: fma32 is the exact w·x + acc rounded once to float32,
// as math/big rounds it (to nearest, ties to even, subnormals and
// overflow included).
func TestFMA32Exact(t *testing.T) {
	for _, c := range fmaCases() {
		w, x, acc := c[0], c[1], c[2]
		p := new(big.Float).SetPrec(400).Mul(big.NewFloat(float64(w)).SetPrec(400), big.NewFloat(float64(x)).SetPrec(400))
		v := new(big.Float).SetPrec(400).Add(p, big.NewFloat(float64(acc)))
		want, _ := v.Float32()
		if v.Sign() == 0 { // an exact zero keeps IEEE's sign: −0 only from −0 + −0
			want = float32(float64(w)*float64(x) + float64(acc))
		}
		if got := fma32(w, x, acc); math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("fma32(%g, %g, %g) = %g (%#08x), exact sum rounded %g (%#08x)", w, x, acc, got, math.Float32bits(got), want, math.Float32bits(want))
		}
	}
}
